"""The GEMM floor: the step's matrix products alone, as plain matmuls of the same shapes.

Per micro-batch of m samples and layer l (in -> out), in the hand-written step's layouts:
forward (m, in) @ W.T, grad-weight dz.T @ (m, in), and grad-input dz @ W (m, in), except
for the first layer, whose input needs no gradient. For the language model the rows are
the positions (rows x L), the layers (C D -> hidden -> V), and the first layer's input, the
embeddings, needs its gradient. No step can take less time than these products on the same
library (everything else it does comes on top).
"""

import numpy as np


class GemmFloor:
    name = "gemm"
    device = "cpu"

    def __init__(self, problem, library="numpy"):
        self.library = library
        if library == "torch-cuda":
            import torch

            def put(a):
                return torch.from_numpy(a).to("cuda")

            self.sync = torch.cuda.synchronize
            self.matmul = torch.matmul
        else:
            xp = np if library == "numpy" else __import__(library)
            put = xp.asarray
            self.sync = None if xp is np else xp.cuda.get_current_stream().synchronize
            self.matmul = xp.matmul
        shape = problem.shape
        if shape.kind == "charlm":
            m, first = problem.y.size, 0
            sizes = (shape.context * shape.embedding_dim, shape.hidden, len(problem.weights[0]))
        else:
            m, first, sizes = shape.micro_batch or shape.batch, 1, shape.sizes
        rng = np.random.default_rng(1)
        dtype = problem.weights[0].dtype

        def array(*dims):
            return put(rng.standard_normal(dims).astype(dtype))

        self.products = []
        for layer, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            a, w, dz = array(m, n_in), array(n_out, n_in), array(m, n_out)
            self.products.append((a, w.T, array(m, n_out)))        # forward
            self.products.append((dz.T, a, array(n_out, n_in)))    # grad-weight
            if layer >= first:
                self.products.append((dz, w, array(m, n_in)))      # grad-input
        self.repeats = len(shape.micro_batches)
        if library != "numpy":
            self.name, self.device = f"gemm-{library}", "gpu"

    def step(self):
        for _ in range(self.repeats):
            for a, b, out in self.products:
                self.matmul(a, b, out=out)
        if self.sync is not None:
            self.sync()

    def flops(self):
        """Floating-point operations per step: 2 m n k per product."""
        total = 0
        for a, b, _ in self.products:
            total += 2 * a.shape[0] * a.shape[1] * b.shape[1]
        return total * self.repeats
