"""`python -m tuner`: the same CLI as the `tuner` command."""

from tuner.cli import main

if __name__ == "__main__":
    main()
