"""Fashion-MNIST as torch tensors, read from its four IDX files (gzip), as
Debian's dataset-fashion-mnist installs them: for examples/torch_mlp.py and
the PyTorch baseline scripts/bench/torch_fmnist.py, which train the same
workload. torch is imported when the data is read, not before, so that a
script can answer --help without it."""

import gzip
import os

DATA_DIR = "/usr/share/datasets/fashion-mnist"  # dataset-fashion-mnist
TRAIN_IMAGES = "train-images-idx3-ubyte.gz"
TRAIN_LABELS = "train-labels-idx1-ubyte.gz"
TEST_IMAGES = "t10k-images-idx3-ubyte.gz"
TEST_LABELS = "t10k-labels-idx1-ubyte.gz"


def present(data_dir=DATA_DIR):
    """Whether data_dir holds the training images."""
    return os.path.exists(os.path.join(data_dir, TRAIN_IMAGES))


def read_idx(path):
    """An IDX file (gzip) as a uint8 tensor of its dimensions."""
    import torch
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
            for i in range(ndim)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]),
                            dtype=torch.uint8).reshape(dims)


def load(data_dir=DATA_DIR):
    """(train images, train labels, test images, test labels): images as
    float32 [N, 784] in [0, 1] (the byte / 255), labels as int64 [N]."""
    def images(name):
        return read_idx(os.path.join(data_dir, name)).reshape(-1, 784) \
            .float() / 255

    def labels(name):
        return read_idx(os.path.join(data_dir, name)).long()

    return (images(TRAIN_IMAGES), labels(TRAIN_LABELS),
            images(TEST_IMAGES), labels(TEST_LABELS))
