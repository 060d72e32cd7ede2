"""Tiny random-init models built from `transformers` config classes (nothing is downloaded: no
`from_pretrained`), their inputs, and a recorder that tells float fallbacks from integer ones.

Each builder returns (model, inputs): `inputs` is a dict of CPU tensors for `model(**inputs)` that
includes `labels`, so the output has `.logits` and `.loss`. Sizes are tiny (hidden 32-64, 2 layers,
sequence 12, vocabulary 128-256, 32x32 images) so the whole tier runs in a couple of minutes.
Dropout is 0 everywhere: the models run in train mode (BatchNorm uses batch statistics) and the
CPU and the device must see the same computation."""
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import transformers as tf

BATCH, SEQ, VOCAB = 2, 12, 128
IMAGE, CHANNELS, CLASSES = 32, 3, 10


def _generator(seed):
    return torch.Generator().manual_seed(seed)


def token_inputs(vocab, seed, mask=False):
    g = _generator(seed)
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=g)
    inputs = {"input_ids": ids, "labels": ids.clone()}
    if mask:
        inputs["attention_mask"] = torch.ones(BATCH, SEQ, dtype=torch.long)
    return inputs


def mlm_inputs(vocab, seed):
    g = _generator(seed)
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=g)
    labels = torch.full_like(ids, -100)  # only the masked positions count, as in BERT's pretraining
    labels[:, ::3] = ids[:, ::3]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
            "labels": labels}


def image_inputs(seed):
    g = _generator(seed)
    return {"pixel_values": torch.randn(BATCH, CHANNELS, IMAGE, IMAGE, generator=g),
            "labels": torch.randint(0, CLASSES, (BATCH,), generator=g)}


def _decoder_kwargs(**extra):
    kw = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, attention_dropout=0.0)
    kw.update(extra)
    return kw


def llama():
    return tf.LlamaForCausalLM(tf.LlamaConfig(**_decoder_kwargs())), token_inputs(VOCAB, 1)


def mistral():
    return (tf.MistralForCausalLM(tf.MistralConfig(**_decoder_kwargs(sliding_window=8))),
            token_inputs(VOCAB, 2, mask=True))


def qwen3():
    return tf.Qwen3ForCausalLM(tf.Qwen3Config(**_decoder_kwargs(head_dim=8))), token_inputs(VOCAB, 3)


EXPERTS = 4


def mixtral(top_k=2):
    cfg = tf.MixtralConfig(**_decoder_kwargs(num_local_experts=EXPERTS, num_experts_per_tok=top_k,
                                             router_jitter_noise=0.0))
    return tf.MixtralForCausalLM(cfg), token_inputs(VOCAB, 4)


def qwen3_moe(top_k=2):
    cfg = tf.Qwen3MoeConfig(**_decoder_kwargs(head_dim=8, num_experts=EXPERTS, num_experts_per_tok=top_k,
                                              moe_intermediate_size=32, decoder_sparse_step=1))
    return tf.Qwen3MoeForCausalLM(cfg), token_inputs(VOCAB, 5)


def gpt2():
    cfg = tf.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)  # tie_word_embeddings: lm_head is wte
    return tf.GPT2LMHeadModel(cfg), token_inputs(VOCAB, 6)


def bert():
    cfg = tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)  # the MLM decoder is tied to the word embeddings
    return tf.BertForMaskedLM(cfg), mlm_inputs(VOCAB, 7)


def vit():
    cfg = tf.ViTConfig(image_size=IMAGE, patch_size=8, num_channels=CHANNELS, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=64, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, num_labels=CLASSES)
    return tf.ViTForImageClassification(cfg), image_inputs(8)


def resnet():
    cfg = tf.ResNetConfig(num_channels=CHANNELS, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                          layer_type="bottleneck", num_labels=CLASSES)
    return tf.ResNetForImageClassification(cfg), image_inputs(9)


def convnext():
    cfg = tf.ConvNextConfig(num_channels=CHANNELS, patch_size=2, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1],
                            drop_path_rate=0.0, image_size=IMAGE, num_labels=CLASSES)
    return tf.ConvNextForImageClassification(cfg), image_inputs(10)


MODELS = {"llama": llama, "mistral": mistral, "qwen3": qwen3, "gpt2": gpt2, "bert": bert, "mixtral": mixtral,
          "qwen3_moe": qwen3_moe, "vit": vit, "resnet": resnet, "convnext": convnext}

# Parameter pairs the model ties (the same Parameter object on the CPU).
TIED = {"gpt2": ("transformer.wte.weight", "lm_head.weight"),
        "bert": ("bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight")}


MOE = {"mixtral", "qwen3_moe"}


def build(name, seed=0, low_precision=False):
    """The model (train mode) and its inputs. MoE models route each token to 2 of 4 experts, except
    for low-precision runs (`low_precision`), which route to all 4: a random-init router has tokens
    whose 2nd and 3rd expert are within ~1e-4 of each other, and bf16 rounding (on the CPU as on the
    device) flips such a choice, which changes that token's output and gradients by O(1); with every
    expert chosen there is no discrete choice to flip, and the whole routing path (top-k, histc,
    sort, gather/scatter of the tokens, per-expert matmuls) still runs.
    ResNet runs in eval mode (BatchNorm on its running statistics) in low precision: with batch
    statistics over a batch of 2 behind a global average pool, BatchNorm's backward cancels almost
    all of the gradient, and the CPU's own bf16 gradients are 15-50 % off the fp32 answer (eval
    mode: <5 %), so nothing could be checked; train-mode BatchNorm is checked in fp32."""
    torch.manual_seed(seed)
    if name in MOE and low_precision:
        model, inputs = MODELS[name](top_k=EXPERTS)
    else:
        model, inputs = MODELS[name]()
    model.train()
    if name == "resnet" and low_precision:
        model.eval()
    return model, inputs


def _tensors(x):
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


class FallbackRecorder(TorchDispatchMode):
    """Attributes every CPU fallback (the delta of trnsim.fallback_report() across one aten call)
    to that call, with the dtypes of its tensor inputs and outputs. A fallback is a float one when
    any of them is floating point or complex (it computes or moves float values on the CPU);
    otherwise (integer / bool only) it is an integer one."""

    def __init__(self, trnsim):
        super().__init__()
        self.trnsim = trnsim
        self.events = {}  # (kind, outer op, fallback op, dtypes) -> calls

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        before = self.trnsim.fallback_report()
        out = func(*args, **kwargs)
        after = self.trnsim.fallback_report()
        if after != before:
            dtypes = sorted({str(t.dtype).replace("torch.", "") for t in _tensors((args, kwargs, out))})
            shapes = " ".join("x".join(map(str, t.shape)) or "0d" for t in _tensors((args, kwargs)))
            is_float = any(t.is_floating_point() or t.is_complex() for t in _tensors((args, kwargs, out)))
            for op, n in after.items():
                delta = n - before.get(op, 0)
                if delta > 0:
                    outer = func.name() if hasattr(func, "name") else str(func)
                    key = ("float" if is_float else "int", outer, op, ",".join(dtypes) + f"; {shapes}")
                    self.events[key] = self.events.get(key, 0) + delta
        return out

    def summary(self):
        """{"float": [...], "int": [...]}: "op (called as X) [dtypes] xN" lines."""
        out = {"float": [], "int": []}
        for (kind, outer, op, dtypes), n in sorted(self.events.items()):
            called = "" if outer == op else f" via {outer}"
            out[kind].append(f"{op}{called} [{dtypes}] x{n}")
        return out
