"""`python -m paddletune`: the same as the `paddletune` command."""

from .cli import main

if __name__ == "__main__":
    main()
