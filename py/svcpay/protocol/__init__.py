"""The HTTP 402 protocol, version 1: bodies, headers, memos and proofs. Pure data, no I/O
except the replay stores."""
