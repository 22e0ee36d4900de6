#!/usr/bin/env bash
# Records a `forensics collect` bundle on the lent GPU machine after a planted fault
# (a kernel writing far out of bounds -> CUDA error 700 and an Xid 31 in the kernel log),
# then analyses it there.  Run from the repository root on the device machine:
#   bash lab/gpu/collect/run.sh        (writes into $OUT)
# The dependencies travel as wheels in .devwheels/ (pip download, see tests/data/collect/README.md).
set -u
# the Python that has torch (and cupy or triton): the server's Python
PY=python3
for p in /opt/torch/.venv/bin/python python3; do
  if $p -c "import torch" 2>/dev/null; then PY=$p; break; fi
done
$PY -m pip install -q --no-index --no-deps --target /tmp/deps .devwheels/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/deps:$PWD
mkdir -p /tmp/app
cat > /tmp/fault.py <<'PY'
try:
    import cupy as cp
except ImportError:
    cp = None
if cp is None:
    import torch, triton, triton.language as tl

    @triton.jit
    def scatter_rows(out, idx, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        rows = tl.load(idx + i, mask=i < n)
        tl.store(out + rows.to(tl.int64) * 4096 * 1024, 1.0, mask=i < n)   # far out of bounds

    out = torch.zeros(1024, device="cuda")
    idx = torch.arange(256, device="cuda", dtype=torch.int32) * 100000
    print("launching scatter_rows", flush=True)
    scatter_rows[(1,)](out, idx, 256, BLOCK=256)
    torch.cuda.synchronize()
    raise SystemExit(0)
k = cp.RawKernel(r'''
extern "C" __global__ void scatter_rows(float* out, const int* idx, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[(long long)idx[i] * 4096 * 1024] = 1.0f;   // idx from a bad batch: far out of bounds
}''', 'scatter_rows')
out = cp.zeros(1024, dtype=cp.float32)
idx = cp.arange(256, dtype=cp.int32) * 100000
print("launching scatter_rows", flush=True)
k((1,), (256,), (out, idx, 256))
cp.cuda.runtime.deviceSynchronize()
PY
( cd /tmp/app && $PY /tmp/fault.py > /tmp/app/app.log 2>&1 ); echo "fault exit $?"
sleep 1
$PY -m forensics collect /tmp/app -o $OUT/h200_bundle.tar.gz --timeout 90 --python $PY
$PY -m forensics analyze $OUT/h200_bundle.tar.gz > $OUT/analyze.txt 2>&1; echo "analyze exit $?"
$PY -m forensics analyze $OUT/h200_bundle.tar.gz --format json -o $OUT/report.json
cat $OUT/analyze.txt | head -80
