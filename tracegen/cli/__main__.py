"""`python -m tracegen.cli`: the `tracegen` command (tracegen.cli.main)."""
from . import main

main()
