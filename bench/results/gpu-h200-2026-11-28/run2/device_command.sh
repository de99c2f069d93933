#!/usr/bin/env bash
# This session's device run (carried in .gpu; not part of the repo).
set -u
OUT=$1
mkdir -p /tmp/b /tmp/p && tar xzf .gpu/gpu-bundle.tar.gz -C /tmp/b
B=/tmp/b/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PATH=$B/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi -L
GPU_SECTIONS=ranks timeout 230 bash bench/gpu_measure.sh $B /tmp/r > $OUT/ranks_log.txt 2>&1; echo "ranks rc=$?"
if ! grep -q "^## 6" /tmp/r/results.md 2>/dev/null; then
  echo "tests failed or timed out before ranks; ranks alone:"
  timeout 200 bash bench/gpu_ranks.sh $B /tmp/r > /tmp/r/ranks_direct.md 2>&1; echo "direct ranks rc=$?"
fi
for lib in cudnn nccl; do
  d=$(python3 -c "import nvidia.$lib, os; print(os.path.join(list(nvidia.$lib.__path__)[0], 'lib'))")
  export LD_LIBRARY_PATH=$d:$LD_LIBRARY_PATH
done
$B/launch/tessera-train --env > /tmp/p/env.txt 2>&1
for conv in auto hand; do
  TESSERA_CONV=$conv TESSERA_CONV_LOG=1 timeout 60 $B/launch/tessera-train --device cuda \
    --model wresnet:depth=50,width=2,image=64,classes=10 --data synthetic --synthetic-size 64 --batch 64 --steps 1 \
    --progress none --no-eval --profile-ops /tmp/p/ops_wresnet_$conv.txt > /dev/null 2> /tmp/p/conv_$conv.err
  echo "profile $conv rc=$?"
done
for conv in auto hand; do
  TESSERA_CONV=$conv timeout 90 python3 bench/gpu_vs_pytorch.py --train $B/launch/tessera-train --models wresnet \
    --rounds 1 --steps 10 --warmup 3 --skip-budget --out /tmp/p/pytorch_$conv.json > /tmp/p/pytorch_$conv.md 2> /tmp/p/pytorch_$conv.err
  echo "pytorch $conv rc=$?"
done
cp /tmp/r/results.md $OUT/results_ranks.md 2>/dev/null
tar czf $OUT/r.tgz -C /tmp r p
tail -22 /tmp/r/results.md; cat /tmp/r/ranks_direct.md 2>/dev/null | tail -15
grep -h "samples/s\|^| wres" /tmp/p/pytorch_*.md; head -14 /tmp/p/ops_wresnet_auto.txt | tail -11; sed -n '4,8p' /tmp/p/ops_wresnet_hand.txt
grep -c "cudnn$" /tmp/p/conv_auto.err; grep -c "hand$" /tmp/p/conv_auto.err; grep cudnn /tmp/p/env.txt
