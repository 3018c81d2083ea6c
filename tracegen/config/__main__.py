"""`python -m tracegen.config --limits [FILE] | --schema`: docs/limits.md and the job JSON Schema
from the declared keys (tracegen.config.main)."""
from . import main

main()
