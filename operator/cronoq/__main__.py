"""`python -m cronoq` is the `cronoq` command."""
import sys

from cronoq.cli import main

sys.exit(main())
