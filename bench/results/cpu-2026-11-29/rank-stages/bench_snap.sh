#!/bin/bash
# bench_snap.sh OUT BENCH: tessera-bench's predictions (no search-time dependence) for a few models
out=$1; b=$2; mkdir -p $out
$b scaling --model mlp --devices 1,2,4,8 --strategies tofu,data,ddp,fsdp --format json -o $out/mlp.json
$b scaling --model transformer:layers=2,d_model=64,heads=4,seq=16,vocab=500 --batch 32 --devices 1,2,4,8 --strategies tofu,ddp,fsdp --roofline h100 --format json -o $out/tr.json
$b scaling --model wresnet:depth=50,width=1 --batch 32 --devices 1,2,4 --strategies tofu,ddp --roofline h100 --format json -o $out/wr.json
$b scaling --model lstm --batch 32 --devices 1,3 --format json -o $out/lstm.json
$b scaling --model mlp --devices 1,2 --device-mem 300KiB --search-time 0.2 --format json -o $out/mlp_budget.json
$b scaling --model mlp --devices 2 --device-mem 1KiB --search-time 0.2 --format json -o $out/mlp_tiny.json
echo done
