"""test_quants_ref.py - checks the C reference dequantiser against quants.py.

Usage: test_quants_ref.py [PATH/TO/TESTS/DIR]   (default: $DS_BUILD/tests)

Runs `test_quant --dump DIR` and `test_quant_lowbit --dump DIR` from that
folder, which write DIR/<type>.bin (quantised rows, rows of random block
bytes, and for the low-bit types rows of edge-case blocks) and DIR/<type>.f32
(what ds_dequantize_row made of them), decodes each .bin with the numpy
implementation and requires the same float32 bits: both sides take the same
float32 products in the same order, so there is no rounding slack to allow for. Prints "ok <type>" or
"FAIL <type>: ..." per type, then "RESULT passed=N failed=M"; exits 1 on any
failure.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quants  # noqa: E402


def compare(name, directory, dequantize):
    """Returns None when the C and numpy decodings agree bit for bit, else a message."""
    with open(os.path.join(directory, name + ".bin"), "rb") as f:
        raw = f.read()
    want = np.fromfile(os.path.join(directory, name + ".f32"), dtype="<f4")
    got = dequantize(name, raw)
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


def check_dump(program, names, dequantize):
    """Runs `program --dump` into a fresh folder and compares each named type's
    files with `dequantize`, printing a line per type. Returns (passed, failed)."""
    passed = failed = 0
    with tempfile.TemporaryDirectory() as directory:
        proc = subprocess.run([program, "--dump", directory], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"FAIL dump: {program} --dump exited {proc.returncode}: {proc.stderr.strip()}")
            return 0, 1
        for name in names:
            try:
                problem = compare(name, directory, dequantize)
            except Exception as exc:  # a crash in one type must not hide the others
                problem = f"{type(exc).__name__}: {exc}"
            if problem:
                failed += 1
                print(f"FAIL {name}: {problem}")
            else:
                passed += 1
                print(f"ok {name}")
    return passed, failed


# each dumping test program and the types whose files it writes
DUMPERS = [
    ("test_quant", [n for n in quants.TYPE_NAMES if n not in quants.LOWBIT_TYPE_NAMES]),
    ("test_quant_lowbit", quants.LOWBIT_TYPE_NAMES),
]


def main(argv):
    if len(argv) == 1 and os.environ.get("DS_BUILD"):
        argv = [argv[0], os.path.join(os.environ["DS_BUILD"], "tests")]
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    passed = failed = 0
    for program, names in DUMPERS:
        ok, bad = check_dump(os.path.join(argv[1], program), names, quants.dequantize)
        passed += ok
        failed += bad
    print(f"RESULT passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
