"""`python -m svcpay.demo`."""

import sys

from svcpay import stopping
from svcpay.demo import main

code = main()
stopping.finished()  # a Ctrl-C from here on changes nothing: the demo is over
sys.exit(code)
