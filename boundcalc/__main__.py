"""``python -m boundcalc``: the same command line as the ``boundcalc`` console script."""

from .cli import main

main()
