import os
import sys

# One BLAS thread, whatever the caller's environment: the harness's reductions then round alike on
# every machine, and no harness process starts OpenBLAS's thread pool (about 0.08 of the 0.17
# core-seconds a `check` spends importing, on the 2-core VM). Set before numpy loads OpenBLAS.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

from .cli import main  # noqa: E402

sys.exit(main())
