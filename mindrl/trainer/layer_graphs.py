"""One micro-batch's forward and backward one decoder layer at a time: ``actor_config.layer_graphs``.

AccumulateGrad (trainer/updater.py) compiles the loss cell's forward and backward as one graph: MindSpore's
front end differentiates, inlines and optimizes all of the model's layers in it (about 30 s for SmolLM2-135M's
30 layers on 2 cores), and the graph keeps every layer's activations in its memory between calls. Here the
micro-batch runs through five small graphs instead, each compiled once whatever the depth:

- the stem: the first layer's inputs (embeddings, rotary tables, attention mask), the loss cell's ``stem``;
- one layer forward (the model's LayerBlock, the layer's weights as inputs), called for each layer in turn;
  only each layer's input is kept (a few MiB), as with full recompute;
- the tail: the last layer's output -> loss, differentiated for that output and for the weights after the last
  layer (final norm, head), which it adds into their buffers;
- one layer backward (the layer's forward run again inside, then its gradient), called last layer first; its
  weight gradients are added into the layer's buffers as they come;
- the embedding's backward, the stem's gradient for the embedding table.

The gradients equal AccumulateGrad's (tests/test_layer_graphs.py); ``python bench/compile_layer_sharing.py``
measures the design. Loss cells that can run this way have ``stem`` and ``tail`` methods (ActorLossCell).

The same key makes the role's forward-only passes (the log-probs of the policy and the reference, the critic's
values, the reward model's scores) run as three graphs, stem, one layer and tail (:class:`LayerGraphsScorer`):
each whole-model forward graph took about 4.4 s to compile for SmolLM2-135M, its three parts about 1.8 s, and
each pass takes about a fifth longer (1.30 s against 1.08 s for 8 responses of 80 tokens; the 30 layer calls cost
more than the layers inside one graph).
"""
from __future__ import annotations

import mindspore as ms
from mindspore import Tensor, nn, ops

from mindrl.trainer.inputs import dummy_inputs, loss_input_names
from mindrl.trainer.updater import GradientBuffers, _add_into, host_outputs, micro_batch_inputs


def supported(cell, backbone=None, backward: bool = True) -> str:
    """Why ``cell`` (a loss cell; with ``backward`` false a scoring cell of ``backbone``) cannot run layer by
    layer, or '' when it can."""
    if not (hasattr(cell, "stem") and hasattr(cell, "tail")):
        return f"{type(cell).__name__} has no stem and tail (the actor's and the critic's cells have them)"
    bb = cell.backbone if backbone is None else backbone
    if bb.tp.size > 1:
        return "tensor parallelism (the layer graphs are built for one device per model)"
    if backward and bb.n_recompute:
        return "recompute (the layer graphs already run each layer's forward again in its backward)"
    if any(getattr(c, "lora_A", None) is not None for _, c in bb.cells_and_names()):
        return "LoRA adapters"
    return ""


def _proj(flat, s):
    """A projection's weights as Projection takes them, from the flat inputs (``s``: their indexes, see _spec)."""
    return flat[s[0]], None if s[1] is None else flat[s[1]], None, None, s[2]


def _maybe(flat, i):
    return None if i is None else flat[i]


def _nest(flat, s):
    """DecoderLayer.weights()'s structure from the flat tuple of its tensors (``s``: _spec's constants)."""
    a, m = s[1], s[3]
    return (flat[s[0]],
            (_proj(flat, a[0]), _proj(flat, a[1]), _proj(flat, a[2]), _proj(flat, a[3]), _maybe(flat, a[4]),
             _maybe(flat, a[5])),
            flat[s[2]],
            (_proj(flat, m[0]), _proj(flat, m[1]), _proj(flat, m[2])))


def _spec(weights):
    """DecoderLayer.weights() -> (its Parameters in a flat list, the constants _nest rebuilds it from)."""
    flat = []

    def take(p):
        if p is None:
            return None
        flat.append(p)
        return len(flat) - 1

    def proj(w):
        return take(w[0]), take(w[1]), w[4]

    norm_in, attn, norm_post, mlp = weights
    spec = (take(norm_in), (proj(attn[0]), proj(attn[1]), proj(attn[2]), proj(attn[3]), take(attn[4]),
                            take(attn[5])),
            take(norm_post), (proj(mlp[0]), proj(mlp[1]), proj(mlp[2])))
    return flat, spec


class _Stem(nn.Cell):
    def __init__(self, cell):
        super().__init__(auto_prefix=False)
        self.cell = cell

    def construct(self, *inputs):
        return self.cell.stem(*inputs)

    def context(self, *inputs):
        """(h, context): the first layer's input and the stem's rotary pairs and mask as one flat tuple of tensors
        (a graph called with tuples among its inputs ran each call about 3x slower here whenever they were new
        objects, and every micro-batch's are)."""
        h, cos, sin, mask = self(*inputs)
        return h, (cos[0], cos[1], sin[0], sin[1]) + (mask if isinstance(mask, tuple) else (mask,))


def run_layers(forward, layer_weights, h, context, kept=None):
    """``h`` through every decoder layer, one call of the ``forward`` graph each; ``kept`` (a list) gets each
    layer's input, which the backward needs."""
    for weights in layer_weights:
        if kept is not None:
            kept.append(h)
        h = forward(h, *weights, *context)
    return h


class _LayerForward(nn.Cell):
    """(h, *weights, *context) -> the layer's output: ``count`` weights, then _Stem.context's tensors."""

    def __init__(self, block, spec, count: int, shared: bool):
        super().__init__(auto_prefix=False)
        self.block, self.spec, self.count, self.shared = block, spec, count, shared

    def construct(self, *args):
        n = self.count
        c = ops.stop_gradient(args[n + 1:])  # constants of the step: no gradient is formed for them
        mask = (c[4], c[5]) if self.shared else c[4]
        return self.block(args[0], (c[0], c[1]), (c[2], c[3]), mask, _nest(args[1:n + 1], self.spec))


class _LayerBackward(nn.Cell):
    """(h, *weights, *context, gradient of the output) -> (gradient of h, of each weight)."""

    def __init__(self, forward):
        super().__init__(auto_prefix=False)
        self.forward, self.count = forward, forward.count
        self.grad = ops.GradOperation(get_all=True, sens_param=True)

    def construct(self, *args):
        grads = self.grad(self.forward)(*args)
        return grads[0], grads[1:self.count + 1]


class _Tail(nn.Cell):
    def __init__(self, cell):
        super().__init__(auto_prefix=False)
        self.cell = cell

    def construct(self, h, *inputs):
        return self.cell.tail(h, *inputs)


class _TailGrad(nn.Cell):
    """(last layer's output, *inputs) -> (loss and metrics, gradient of that output); the gradients of ``params``
    (the weights after the last layer) are added into ``accum``."""

    def __init__(self, loss_cell, params, accum):
        super().__init__(auto_prefix=False)
        self.params, self.accum = ms.ParameterTuple(params), accum
        self.grad_fn = ms.value_and_grad(_Tail(loss_cell), 0, self.params, has_aux=True)
        self.hyper_map = ops.HyperMap()

    def construct(self, h, *inputs):
        outs, (dh, grads) = self.grad_fn(h, *inputs)
        return ops.depend((outs, dh), self.hyper_map(_add_into, self.accum, grads))


class _StemEmbeddings(nn.Cell):
    def __init__(self, loss_cell):
        super().__init__(auto_prefix=False)
        self.loss = loss_cell

    def construct(self, *inputs):
        return self.loss.stem(*inputs)[0]


class _EmbeddingGrad(nn.Cell):
    """(gradient of the stem's embeddings, *inputs): the embedding table's gradient, added into its buffer."""

    def __init__(self, loss_cell, table, accum):
        super().__init__(auto_prefix=False)
        self.params, self.accum = ms.ParameterTuple([table]), accum
        self.stem = _StemEmbeddings(loss_cell)
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.hyper_map = ops.HyperMap()

    def construct(self, dh, *inputs):
        grads = self.grad(self.stem, self.params)(*inputs, dh)
        return ops.depend(dh.sum(), self.hyper_map(_add_into, self.accum, grads))


class LayerWeights:
    """Each decoder layer's weights as graph inputs: tensors that share the Parameters' memory (``views``), and the
    constants _LayerForward rebuilds DecoderLayer.weights()'s structure from (``spec``, ``count``)."""

    def __init__(self, backbone):
        self.params, spec = [], None
        for layer in backbone.layers:
            flat, spec = _spec(layer.weights())
            self.params.append(flat)
        self.spec, self.count = spec, len(self.params[0])
        self._views = []

    def views(self) -> list:
        """Made again when a Parameter's memory moved (its set_data, as a checkpoint load does); new ones for every
        micro-batch cost 10% more time (0.2 s a micro-batch at SmolLM2-135M's shapes)."""
        if len(self._views) != len(self.params) or any(
                v.data_ptr() != p.data_ptr() for views, flat in zip(self._views, self.params)
                for v, p in zip(views, flat)):
            self._views = [tuple(Tensor(p) for p in flat) for flat in self.params]
        return self._views


class LayerGraphsScorer:
    """A forward-only cell with ``stem`` and ``tail`` (ResponseLogProbs, SharedPromptLogProbs, ResponseValues,
    RewardModel) run as three graphs: the stem, one decoder layer called for each layer, the tail. It is called and
    compiled as the cell is, with the same inputs (its ``construct`` is the cell's, for their names); the outputs
    are the cell's (tests/test_layer_graphs.py)."""

    def __init__(self, cell, backbone):
        why = supported(cell, backbone, backward=False)
        if why:
            raise ValueError(f"layer_graphs: not with {why}")
        self.cell, self.construct = cell, cell.construct
        self.weights = LayerWeights(backbone)
        self.stem, self.tail = _Stem(cell), _Tail(cell)
        self.forward = _LayerForward(backbone.block, self.weights.spec, self.weights.count,
                                     bool(getattr(cell, "group", 0)))  # packed groups: the mask is a pair

    def __call__(self, *inputs):
        h, context = self.stem.context(*inputs)
        return self.tail(run_layers(self.forward, self.weights.views(), h, context), *inputs)

    def compile(self, *inputs) -> None:
        """Compile the three graphs for these inputs (the stem runs, the others compile at the shapes it gives)."""
        h, context = self.stem.context(*inputs)
        self.forward.compile(h, *self.weights.views()[0], *context)
        self.tail.compile(h, *inputs)


def scoring_cell(cell, backbone, layer_graphs: bool):
    """``cell`` itself, or with ``layer_graphs`` the same pass one decoder layer per graph (LayerGraphsScorer)."""
    return LayerGraphsScorer(cell, backbone) if layer_graphs else cell


class LayerGraphsAccumulateGrad:
    """AccumulateGrad's interface (``inputs``, ``params``, ``accum``, ``run``, ``compile_for``), computed layer by
    layer (see the module's docstring)."""

    def __init__(self, loss_cell, params, accum=None):
        why = supported(loss_cell)
        if why:
            raise ValueError(f"layer_graphs: not with {why}")
        self.inputs, self.what = loss_input_names(loss_cell), type(loss_cell).__name__
        self.params = ms.ParameterTuple(params)
        self.accum = GradientBuffers().take(self.params) if accum is None else accum
        bb = loss_cell.backbone
        buffer_of = {p.name: b for p, b in zip(self.params, self.accum)}
        self.weights = LayerWeights(bb)
        self.buffers = []  # per layer: its weights' gradient buffers
        in_layers = set()
        for flat in self.weights.params:
            missing = [p.name for p in flat if p.name not in buffer_of]
            if missing:
                raise ValueError(f"layer_graphs: {missing[0]} is not trained (frozen layers run as one graph)")
            self.buffers.append([buffer_of[p.name] for p in flat])
            in_layers.update(p.name for p in flat)
        table = bb.embed_tokens.weight
        rest = [(p, b) for p, b in zip(self.params, self.accum) if p.name not in in_layers]
        tail = [(p, b) for p, b in rest if p.name != table.name or loss_cell.tied_embeddings]
        self.stem = _Stem(loss_cell)
        self.forward = _LayerForward(bb.block, self.weights.spec, self.weights.count, loss_cell.shared_prompts)
        self.backward = _LayerBackward(self.forward)
        self.tail = _TailGrad(loss_cell, [p for p, _ in tail], ms.ParameterTuple([b for _, b in tail]))
        self.embedding = None
        if table.name in buffer_of:
            self.embedding = _EmbeddingGrad(loss_cell, table, ms.ParameterTuple([buffer_of[table.name]]))

    def run(self, arrays, denom) -> list:
        """Forward + backward of one micro-batch (``arrays``: name -> rows); returns [loss, *metrics] as floats."""
        return host_outputs(self._run(micro_batch_inputs(self.inputs, arrays, self.what, denom)))

    def _run(self, inputs):
        h, context = self.stem.context(*inputs)
        layer_weights, kept = self.weights.views(), []
        outs, dh = self.tail(run_layers(self.forward, layer_weights, h, context, kept), *inputs)
        for weights, buffers, h in zip(reversed(layer_weights), reversed(self.buffers), reversed(kept)):
            dh, grads = self.backward(h, *weights, *context, dh)
            for buf, g in zip(buffers, grads):
                ops.assign_add(buf, g)
        if self.embedding is not None:
            self.embedding(dh, *inputs)
        return outs

    def compile_for(self, rows: int, sequence: int, response: int, arrays=None) -> None:
        """Compile every graph for ``rows`` rows of these widths, or for ``arrays``: the stem runs (embeddings
        and masks only), the others compile at the shapes it gives."""
        arrays = dummy_inputs(self.inputs, rows, sequence, response) if arrays is None else arrays
        inputs = micro_batch_inputs(self.inputs, arrays, "inputs", 1.0)
        h, context = self.stem.context(*inputs)
        weights = self.weights.views()[0]
        self.forward.compile(h, *weights, *context)
        self.tail.compile(h, *inputs)
        self.backward.compile(h, *weights, *context, h)
        if self.embedding is not None:
            self.embedding.compile(h, *inputs)
