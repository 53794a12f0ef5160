"""The demo workload for `make demo`: a toy "training loop" that mixes pure-Python work,
C-library work (zlib, hashlib, json) and a worker thread, so the flame graph shows Python
and native frames together.

    python3 demo/app.py [SECONDS]
"""
import hashlib
import json
import sys
import threading
import time
import zlib


def tokenize(text):
    return [w.lower().strip(".,") for w in text.split()]


def build_vocab(batch):
    vocab = {}
    for doc in batch:
        for tok in tokenize(doc):
            vocab[tok] = vocab.get(tok, 0) + 1
    return vocab


def forward(weights, features):
    # A pure-Python "matmul".
    return [sum(w * f for w, f in zip(row, features)) for row in weights]


def train_step(weights, batch):
    vocab = build_vocab(batch)
    features = [float(len(vocab) % (i + 7)) for i in range(64)]
    out = forward(weights, features)
    return sum(out)


def checkpoint(step, weights):
    blob = json.dumps({"step": step, "weights": weights}).encode()
    packed = zlib.compress(blob, 6)
    return hashlib.sha256(packed).hexdigest()


class Prefetcher(threading.Thread):
    """Loads and decompresses "shards" in the background, like a data loader."""

    def __init__(self, stop):
        super().__init__(name="data-loader", daemon=True)
        self.stop = stop
        self.shard = zlib.compress(b"the quick brown fox jumps over the lazy dog " * 20000)

    def run(self):
        while not self.stop.is_set():
            data = zlib.decompress(self.shard)
            hashlib.md5(data).digest()


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5
    text = "Probing shows the Python call chain and the native code under it. " * 40
    batch = [text] * 8
    weights = [[(i * j) % 11 / 10.0 for j in range(64)] for i in range(64)]
    stop = threading.Event()
    Prefetcher(stop).start()
    end = time.monotonic() + seconds
    step = 0
    while time.monotonic() < end:
        train_step(weights, batch)
        if step % 20 == 0:
            checkpoint(step, weights)
        step += 1
    stop.set()
    print(f"demo: {step} steps")


if __name__ == "__main__":
    main()
