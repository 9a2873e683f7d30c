import sys

from evalgate.cli import main

sys.exit(main())
