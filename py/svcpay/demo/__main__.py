"""`python -m svcpay.demo`."""

import sys

from svcpay.demo import main

sys.exit(main())
