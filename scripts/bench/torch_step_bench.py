#!/usr/bin/env python3
"""Times a ShardPS config's model in PyTorch, for tools/step_timer.

    python3 scripts/bench/torch_step_bench.py \\
        --config configs/fmnist_cnn.pbtxt [--device cuda] [--steps 200] [--warmup_steps 20]

Builds the config's dense layers (FULLY_CONNECTED, CONV2D, MAX_POOL,
AVG_POOL, RELU, SIGMOID, TANH, FLATTEN, DROPOUT) as a torch.nn.Sequential
with the config's input shape and batch size, on random inputs and labels,
and times three kinds of step, each the median over --steps after
--warmup_steps, with the device synchronized at the end of every step:

  compute       forward, loss, backward; inputs already on the device. The
                plain PyTorch step without the optimizer.
  compute_host  as a parameter-server trainer must: the parameters and the
                batch copied from host memory to the device first, the
                gradients copied back to host memory at the end. This is
                what tools/step_timer times for ShardPS (Model::TrainBatch).
  train         compute plus the config's optimizer (SGD with momentum,
                Adam, Adagrad or plain SGD) on the device: a single-process
                training step.

FP32 throughout: TF32 is off for matrix products and convolutions, as in
ShardPS's CUDA backend (docs/cuda.md). Prints one JSON line per kind to
stdout ({"event":"torch_step","config":...,"kind":...,"median_ms":...}) and
a summary to stderr. Needs PyTorch; exits 2 without it or on a config it
cannot build.
"""

import argparse
import json
import re
import statistics
import sys
import time


def parse_pbtxt(text):
    """A ModelConfig in protobuf text format, as nested dicts: repeated
    fields (layers) become lists, scalars strings/numbers."""
    text = re.sub(r"#[^\n]*", "", text)
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"|[{}:]|[^\s{}:"]+', text)
    pos = 0

    def value(tok):
        if tok.startswith('"'):
            return tok[1:-1]
        try:
            return int(tok)
        except ValueError:
            try:
                return float(tok)
            except ValueError:
                return tok  # an enum name or bool

    def block():
        nonlocal pos
        out = {}
        while pos < len(tokens) and tokens[pos] != "}":
            name = tokens[pos]
            pos += 1
            if tokens[pos] == ":":
                pos += 1
            if tokens[pos] == "{":
                pos += 1
                v = block()
                pos += 1  # the closing brace
            else:
                v = value(tokens[pos])
                pos += 1
            if name == "layers":
                out.setdefault(name, []).append(v)
            else:
                out[name] = v
        return out

    return block()


def build_model(torch, config, input_dim=784, num_classes=10):
    """(torch.nn.Sequential, input shape without the batch) of a config."""
    cur = input_shape(config, input_dim)
    in_shape = tuple(cur)
    mods = []
    for layer in config.get("layers", []):
        layer_mods, cur = layer_modules(torch.nn, layer, cur)
        mods += layer_mods
    loss = config.get("loss", {}).get("type", "SOFTMAX_CROSS_ENTROPY")
    if loss != "SOFTMAX_CROSS_ENTROPY":
        raise ValueError("loss %s: only SOFTMAX_CROSS_ENTROPY here" % loss)
    if cur != [num_classes]:
        raise ValueError("the model ends in %s values, not %d classes" %
                         (cur, num_classes))
    return torch.nn.Sequential(*mods), in_shape


def input_shape(config, input_dim):
    """The shape of one example, as the trainer reads it: the config's
    input_shape, a square image for a model with image layers, else flat."""
    shape = config.get("input_shape")
    image = any(l.get("type") in ("CONV2D", "MAX_POOL", "AVG_POOL")
                for l in config.get("layers", []))
    if shape:
        return [shape["channels"], shape["height"], shape["width"]]
    if image:
        side = int(round(input_dim ** 0.5))
        return [1, side, side]
    return [input_dim]


def flat_size(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def window_out(size, k, s, p):
    """Output size of a convolution or pooling window along one side."""
    return (size + 2 * p - k) // s + 1


ACTIVATIONS = {"RELU": "ReLU", "SIGMOID": "Sigmoid", "TANH": "Tanh"}


def layer_modules(nn, layer, cur):
    """([torch.nn modules], output shape) of one config layer that takes
    inputs of shape `cur`."""
    t = layer.get("type")
    if t == "FULLY_CONNECTED":
        mods = [nn.Flatten()] if len(cur) > 1 else []
        out = layer["output_dim"]
        return mods + [nn.Linear(flat_size(cur), out)], [out]
    if t == "CONV2D":
        k = layer["kernel_size"]
        s = layer.get("stride", 1) or 1
        p = layer.get("padding", 0)
        return ([nn.Conv2d(cur[0], layer["filters"], k, stride=s,
                           padding=p)],
                [layer["filters"], window_out(cur[1], k, s, p),
                 window_out(cur[2], k, s, p)])
    if t in ("MAX_POOL", "AVG_POOL"):
        k = layer["pool_size"]
        s = layer.get("stride", 0) or k
        p = layer.get("padding", 0)
        pool = (nn.MaxPool2d(k, stride=s, padding=p) if t == "MAX_POOL" else
                nn.AvgPool2d(k, stride=s, padding=p, count_include_pad=True))
        return [pool], [cur[0], window_out(cur[1], k, s, p),
                        window_out(cur[2], k, s, p)]
    if t in ACTIVATIONS:
        return [getattr(nn, ACTIVATIONS[t])()], cur
    if t == "FLATTEN":
        return [nn.Flatten()], [flat_size(cur)]
    if t == "DROPOUT":
        return [nn.Dropout(layer.get("dropout_rate", 0.0))], cur
    raise ValueError("layer %s: type %s has no PyTorch equivalent here"
                     % (layer.get("name", "?"), t))


def make_optimizer(torch, config, params):
    opt = config.get("optimizer", {})
    t = opt.get("type", "SGD")
    lr = float(opt.get("learning_rate", 0.01))
    if t == "MOMENTUM":
        return torch.optim.SGD(params, lr=lr,
                               momentum=float(opt.get("momentum", 0.9)))
    if t == "ADAM":
        return torch.optim.Adam(params, lr=lr)
    if t == "ADAGRAD":
        return torch.optim.Adagrad(params, lr=lr)
    return torch.optim.SGD(params, lr=lr)


def time_steps(torch, device, step, warmup, steps):
    """Milliseconds of each timed call of step(i), synchronized."""
    sync = (torch.cuda.synchronize if device.type == "cuda" else
            (lambda: None))
    for i in range(warmup):
        step(i)
    sync()
    ms = []
    for i in range(steps):
        start = time.perf_counter()
        step(warmup + i)
        sync()
        ms.append((time.perf_counter() - start) * 1e3)
    return ms


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--batch_size", type=int, default=0,
                   help="0: the config's")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup_steps", type=int, default=20)
    p.add_argument("--kinds", default="compute,compute_host,train",
                   help="comma-separated subset of compute,compute_host,train")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print("torch_step_bench: no PyTorch (%s)" % e, file=sys.stderr)
        return 2
    with open(args.config) as f:
        config = parse_pbtxt(f.read())
    batch = args.batch_size or int(config.get("batch_size", 0))
    if batch <= 0:
        print("torch_step_bench: no batch_size in the config; pass one",
              file=sys.stderr)
        return 2
    try:
        model, in_shape = build_model(torch, config)
    except (ValueError, KeyError) as e:
        print("torch_step_bench: %s: %s" % (args.config, e), file=sys.stderr)
        return 2
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("torch_step_bench: --device=cuda but torch sees no GPU",
                  file=sys.stderr)
            return 2
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(int(config.get("seed", 1)))
    steps = make_steps(torch, model.to(device), config, in_shape, batch,
                       device)
    name = config.get("name", args.config)
    for kind in args.kinds.split(","):
        if kind not in steps:
            print("torch_step_bench: unknown kind %r" % kind, file=sys.stderr)
            return 2
        ms = time_steps(torch, device, steps[kind], args.warmup_steps,
                        args.steps)
        line = step_line(torch, device, name, kind, batch, args.steps, ms)
        print(json.dumps(line), flush=True)
        print("torch_step_bench: %s %s on %s, batch %d: median %.3f ms" %
              (name, kind, line["device"], batch, line["median_ms"]),
              file=sys.stderr)
    return 0


def make_steps(torch, model, config, in_shape, batch, device):
    """{kind: step(i)}: compute (forward and backward on the device),
    compute_host (with parameters in and gradients out through pageable
    host memory) and train (compute and the optimizer)."""
    model.train()
    loss_fn = torch.nn.CrossEntropyLoss()
    params = list(model.parameters())
    # A few distinct batches, cycled, on the host and on the device.
    n_batches = 8
    host_x = torch.rand((n_batches, batch) + in_shape)
    host_y = torch.randint(0, 10, (n_batches, batch))
    dev_x = host_x.to(device)
    dev_y = host_y.to(device)
    host_params = [q.detach().cpu().clone() for q in params]
    host_grads = [torch.empty_like(q) for q in host_params]
    opt = make_optimizer(torch, config, params)

    def fwd_bwd(x, y):
        for q in params:
            q.grad = None
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss

    def compute(i):
        fwd_bwd(dev_x[i % n_batches], dev_y[i % n_batches])

    def compute_host(i):
        with torch.no_grad():
            for q, h in zip(params, host_params):
                q.copy_(h)
        x = host_x[i % n_batches].to(device)
        y = host_y[i % n_batches].to(device)
        fwd_bwd(x, y)
        for q, h in zip(params, host_grads):
            h.copy_(q.grad)  # to pageable host memory: waits for the device

    def train(i):
        fwd_bwd(dev_x[i % n_batches], dev_y[i % n_batches])
        opt.step()

    return {"compute": compute, "compute_host": compute_host, "train": train}


def step_line(torch, device, name, kind, batch, steps, ms):
    """The JSON line of one kind's timings `ms`."""
    ms_sorted = sorted(ms)
    return {
        "event": "torch_step", "config": name, "kind": kind,
        "device": (torch.cuda.get_device_name(device)
                   if device.type == "cuda" else "cpu"),
        "torch": torch.__version__, "batch": batch, "steps": steps,
        "median_ms": statistics.median(ms),
        "mean_ms": statistics.fmean(ms),
        "p10_ms": ms_sorted[int(0.1 * len(ms))],
        "p90_ms": ms_sorted[min(len(ms) - 1, int(0.9 * len(ms)))],
        "min_ms": ms_sorted[0],
        "samples_per_s": batch / statistics.median(ms) * 1e3,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
