"""Ground truth for recording: a busy loop at module level, so the leaf frame is <module>.
Runs SECONDS (argv[1], default 2)."""
import sys
import time

end = time.monotonic() + (float(sys.argv[1]) if len(sys.argv) > 1 else 2)
x = 0
while time.monotonic() < end:
    for i in range(5000): x += i  # @module_loop
