import sys

from gpufeed.cli.main import main

sys.exit(main())
