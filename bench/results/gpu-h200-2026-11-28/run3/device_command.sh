#!/usr/bin/env bash
# This session's third device run (carried in .gpu; kept in bench/results).
set -u
DEST=$1
OUT=/tmp/o
mkdir -p $OUT
save() { tar czf $DEST/r3.tgz -C /tmp o; }
mkdir -p /tmp/b /tmp/p && tar xzf .gpu/gpu-bundle.tar.gz -C /tmp/b
B=/tmp/b/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PATH=$B/bin:$PATH PYTHONUNBUFFERED=1
for lib in cudnn nccl; do
  d=$(python3 -c "import nvidia.$lib, os; print(os.path.join(list(nvidia.$lib.__path__)[0], 'lib'))")
  export LD_LIBRARY_PATH=$d:$LD_LIBRARY_PATH
done
timeout 40 $B/tests/exec_cuda_device_test > $OUT/gpu_tests.txt 2>&1; echo "tests rc=$?"; save
TESSERA_CONV_LOG=1 timeout 30 $B/launch/tessera-train --device cuda \
  --model wresnet:depth=50,width=2,image=64,classes=10 --data synthetic --synthetic-size 64 --batch 64 --steps 1 \
  --progress none --no-eval --profile-ops $OUT/ops_wresnet.txt > /dev/null 2> $OUT/conv_choices.txt
echo "profile wresnet rc=$?"; save
timeout 30 $B/launch/tessera-train --device cuda \
  --model transformer:layers=24,d_model=768,heads=12,seq=256,vocab=8000 --data synthetic --synthetic-size 16 --batch 16 \
  --steps 1 --progress none --no-eval --profile-ops $OUT/ops_transformer.txt > /dev/null 2>&1
echo "profile transformer rc=$?"; save
timeout 70 python3 bench/gpu_vs_pytorch.py --train $B/launch/tessera-train --models transformer,wresnet \
  --rounds 1 --steps 10 --warmup 3 --skip-budget --out $OUT/pytorch.json > $OUT/pytorch.md 2> $OUT/pytorch.err
echo "pytorch rc=$?"; save
timeout 80 python3 bench/gpu_vs_pytorch.py --train $B/launch/tessera-train --models wresnet --rounds 1 --steps 10 \
  --warmup 3 --ratios 4,12 --swap-time-limit 5 --out $OUT/budget_wresnet.json > $OUT/budget_wresnet.md \
  2> $OUT/budget_wresnet.err
echo "budget rc=$?"; save
grep -E "PASSED|FAILED|checked" $OUT/gpu_tests.txt | head -8
sed -n '4,12p' $OUT/ops_wresnet.txt; sed -n '1p;4,10p' $OUT/ops_transformer.txt
tail -4 $OUT/pytorch.md; tail -8 $OUT/budget_wresnet.md; tail -3 $OUT/budget_wresnet.err
