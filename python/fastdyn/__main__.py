"""`python -m fastdyn [run] script.py [args...]`: see fastdyn.cli."""
import sys

from fastdyn.cli import main

sys.exit(main())
