import sys

from testbed.controller.process import main

sys.exit(main())
