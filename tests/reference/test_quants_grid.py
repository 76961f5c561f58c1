"""test_quants_grid.py - checks the C dequantiser of the grid ("iq") types against quants_grid.py.

Usage: test_quants_grid.py [PATH/TO/test_quant_grid]   (default: $DS_BUILD/tests/test_quant_grid)

Runs `test_quant_grid --dump DIR`, which writes DIR/<type>.bin (quantised
rows, then random valid blocks) and DIR/<type>.f32 (what ds_dequantize_row
made of them), decodes each .bin with the numpy implementation and requires
the same float32 bits: both sides take the same float32 products in the
same order. Prints "ok <type>" or "FAIL <type>: ..." per type, then
"RESULT passed=N failed=M"; exits 1 on any failure.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quants_grid  # noqa: E402


def compare(name, directory):
    """Returns None when the C and numpy decodings agree bit for bit, else a message."""
    with open(os.path.join(directory, name + ".bin"), "rb") as f:
        raw = f.read()
    want = np.fromfile(os.path.join(directory, name + ".f32"), dtype="<f4")
    got = quants_grid.dequantize(name, raw)
    if got.shape != want.shape:
        return f"numpy decodes {got.size} elements, C wrote {want.size}"
    if not np.all(np.isfinite(want)):
        return f"C output has {np.count_nonzero(~np.isfinite(want))} non-finite values"
    differ = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    if differ.size:
        i = differ[0]
        max_abs = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        return (f"{differ.size} of {want.size} elements differ; first at {i}: "
                f"numpy {got[i]!r} C {want[i]!r}; max abs diff {max_abs:g}")
    return None


def main(argv):
    if len(argv) == 1 and os.environ.get("DS_BUILD"):
        argv = [argv[0], os.path.join(os.environ["DS_BUILD"], "tests", "test_quant_grid")]
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    passed = failed = 0
    with tempfile.TemporaryDirectory() as directory:
        proc = subprocess.run([argv[1], "--dump", directory], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"FAIL dump: {argv[1]} --dump exited {proc.returncode}: {proc.stderr.strip()}")
            print("RESULT passed=0 failed=1")
            return 1
        for name in quants_grid.TYPE_NAMES:
            try:
                problem = compare(name, directory)
            except Exception as exc:  # a crash in one type must not hide the others
                problem = f"{type(exc).__name__}: {exc}"
            if problem:
                failed += 1
                print(f"FAIL {name}: {problem}")
            else:
                passed += 1
                print(f"ok {name}")
    print(f"RESULT passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
