"""`python -m svcpay.cli`."""

import sys

from svcpay.cli import main

sys.exit(main())
