#!/usr/bin/env bash
# Kernels that are not C, through `attncheck --exec` (called by ci/test.sh; BUILD_DIR respected):
#   1. plugins/numpy_attention.py in both modes: the correct kernel passes a short campaign, and
#      `prove` with it as the base catches its planted bug (no max subtraction) and shrinks it;
#   2. plugins/torch_sdpa_kernel.py (PyTorch's SDPA as the kernel) where torch >= 2.0 imports.
#      Without one, ATTNCHECK_TORCH=install (the default) installs torch from PyPI into
#      ~/.cache/attncheck/torch-venv once (measured 2026-11-24: 103 s, 5.4 GB: PyPI's Linux wheel
#      carries CUDA's libraries; it runs on the CPU); ATTNCHECK_TORCH=skip skips it, and a failed
#      install skips it: either way the step says so and why, never silently.
set -euo pipefail
cd "$(dirname "$0")/.."
b=${BUILD_DIR:-build}
attncheck="$b/harness/attncheck"

# A python3 with numpy (ci/install-deps.sh installs python3-numpy; a pyenv python3 may lack it).
py=""
for p in ${ATTNCHECK_PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || { echo "test-exec: no python3 with numpy (apt-get install python3-numpy)" >&2; exit 1; }

# A campaign that must pass: its summary line only, everything when it does not.
quiet() {
  local out
  if ! out=$("$@" 2>&1); then echo "$out"; return 1; fi
  echo "$out" | grep -m1 ' cases, ' || true
}

np_kernel="$py plugins/numpy_attention.py"
caps=plugins/numpy_attention.caps.json

echo "numpy example, persistent: 40 cases"
quiet "$attncheck" fuzz --exec-persistent "$np_kernel --serve" --caps "$caps" --seed 1 --cases 40 --quiet
echo "numpy example, one-shot (a process per call): 6 cases"
quiet "$attncheck" fuzz --exec "$np_kernel {in} {out}" --caps "$caps" --seed 2 --cases 6 --quiet

echo "numpy example: prove catches its planted bug (no max subtraction) and shrinks it"
out=$("$attncheck" prove --exec-persistent "$np_kernel --serve" \
        --exec-persistent "$np_kernel --serve --bug=no-max-subtraction" \
        --exec-name numpy-attention --exec-name numpy-attention-mutant-no-max-subtraction --caps "$caps" \
        --seed 1 --clean-cases 30 --cases 200 --shrink-steps 100 --junit "$b/exec-prove.xml")
echo "$out" | tail -4
echo "$out" | grep -q 'PROVED: base clean, every mutant caught'
echo "$out" | grep -q 'numpy-attention-mutant-no-max-subtraction .* yes .* v1 seed=.* b=1 hq=1 hkv=1 nq=1 nk=1 '
grep -q 'name="mutant numpy-attention-mutant-no-max-subtraction is caught"' "$b/exec-prove.xml"

echo "numpy example, one-shot: the planted bug fails and is shrunk"
set +e
out=$("$attncheck" fuzz --exec "$np_kernel --bug=no-max-subtraction {in} {out}" --caps "$caps" \
        --exec-name numpy-nomax --seed 2 --cases 50 --stop-first --shrink-steps 30 --quiet)
rc=$?
set -e
echo "$out" | grep -m2 -E '^(FAIL|  minimal)' | cut -c1-200
[ "$rc" -eq 1 ] && echo "$out" | grep -q '^  minimal:  v1 ' || { echo "$out"; echo "expected exit 1 and a minimal line, got $rc" >&2; exit 1; }

# ---- PyTorch ------------------------------------------------------------------------------------
torch_py=""
has_sdpa='import torch, numpy; assert hasattr(torch.nn.functional, "scaled_dot_product_attention")'
for p in ${ATTNCHECK_PYTHON:-} python3 /usr/bin/python3 "$HOME/.cache/attncheck/torch-venv/bin/python"; do
  if [ -x "$(command -v "$p" 2>/dev/null)" ] && "$p" -c "$has_sdpa" 2>/dev/null; then torch_py=$p; break; fi
done
if [ -z "$torch_py" ] && [ "${ATTNCHECK_TORCH:-install}" = install ]; then
  venv="$HOME/.cache/attncheck/torch-venv"
  echo "torch: none with scaled_dot_product_attention here; installing torch and numpy into $venv (about 2 minutes, 5.4 GB)"
  if { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } &&
     timeout 1200 "$venv/bin/pip" install -q --progress-bar off torch numpy >"$b/torch-install.log" 2>&1 &&
     "$venv/bin/python" -c "$has_sdpa" 2>>"$b/torch-install.log"; then
    torch_py="$venv/bin/python"
  else
    echo "skipped: the PyTorch SDPA example: installing torch failed (last lines of $b/torch-install.log:)"
    tail -3 "$b/torch-install.log" | sed 's/^/  /'
  fi
fi
if [ -z "$torch_py" ]; then
  [ "${ATTNCHECK_TORCH:-install}" = install ] ||
    echo "skipped: the PyTorch SDPA example: no python with torch >= 2.0 here and ATTNCHECK_TORCH=${ATTNCHECK_TORCH}"
  exit 0
fi
echo "PyTorch SDPA example ($("$torch_py" -c 'import torch; print("torch", torch.__version__, "on", "cuda" if torch.cuda.is_available() else "cpu")')):"
# f32 and f16: on the CPU, torch's bf16 SDPA flushes results below bf16's smallest normal to zero
# (dist=tiny() cases fail dQ/dK by 8-100x; README, "Kernels that are not C").
# PyTorch is a third-party kernel: what attncheck finds in it is a finding, printed, not a
# failure of this test (its CPU kernels' rounding also moves with the thread count: f16 LSE
# at 6.3 scaled in one run of 40 cases that passed in others).  The test fails when the
# --exec path could not judge it: exit 2 or 3, or no summary.
findings() {
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  echo "$out" | grep -m1 ' cases, ' || { echo "$out"; return 1; }
  echo "$out" | grep -A3 '^distinct failures' | cut -c1-200 || true
  [ "$rc" -le 1 ] || { echo "$out" | tail -5; return 1; }
}
findings "$attncheck" fuzz --exec-persistent "$torch_py plugins/torch_sdpa_kernel.py --serve" \
  --caps plugins/torch_sdpa_kernel.caps.json --dtype f32,f16 --seed 1 --cases 40 --quiet
findings "$attncheck" fuzz --exec "$torch_py plugins/torch_sdpa_kernel.py {in} {out}" \
  --caps plugins/torch_sdpa_kernel.caps.json --dtype f32,f16 --seed 2 --cases 3 --quiet
