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
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quants_grid  # noqa: E402
from test_quants_ref import check_dump  # noqa: E402


def main(argv):
    if len(argv) == 1 and os.environ.get("DS_BUILD"):
        argv = [argv[0], os.path.join(os.environ["DS_BUILD"], "tests", "test_quant_grid")]
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    passed, failed = check_dump(argv[1], quants_grid.TYPE_NAMES, quants_grid.dequantize)
    print(f"RESULT passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
