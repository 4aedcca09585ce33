"""``python -m boundcalc``: the same command line as the ``boundcalc`` console script."""

from .cli import main

if __name__ == "__main__":  # importing the module (pkgutil.walk_packages) runs nothing
    main()
