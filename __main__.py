"""``python -m panelpack``: the same command as the ``panelpack`` console script."""

from panelpack.launch import main

if __name__ == "__main__":
    main()
