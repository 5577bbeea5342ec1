"""The old path of the `routedvlm` command (`routedvlm.cli`): console scripts installed before it moved call
`routedvlm.training.cli:main`; they keep working until the package is installed again."""
from routedvlm.cli import main, train_router_main

__all__ = ["main", "train_router_main"]

if __name__ == "__main__":
    import sys

    sys.exit(main())
