"""torch.compile(backend=trnsim.compile_backend) on an off-the-shelf transformers Llama (issue 10.7:
the bf16 model failed with "view size is not compatible" because SDPA's output did not have the
strides its meta function promises)."""
import copy

import pytest
import torch

from test_ops import strict_lowering, trnsim  # noqa: F401

transformers = pytest.importorskip("transformers")


def tiny_llama(dtype):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    return transformers.LlamaForCausalLM(cfg).to(dtype)


def test_compiled_bf16_llama_matches_the_cpu():
    model = tiny_llama(torch.bfloat16).eval()
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids).logits.float()
        compiled = torch.compile(copy.deepcopy(model).to("neuron"), backend=trnsim.compile_backend)
        got = compiled(ids.to("neuron")).logits.float().cpu()
    torch.testing.assert_close(got, expected, rtol=3e-2, atol=3e-2)
    assert not trnsim.fallback_report(), trnsim.fallback_report()


def test_compiled_fp32_llama_trains_like_the_cpu():
    model = tiny_llama(torch.float32)
    device_model = copy.deepcopy(model).to("neuron")
    compiled = torch.compile(device_model, backend=trnsim.compile_backend)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(2))
    loss_cpu = model(ids, labels=ids).loss
    loss_cpu.backward()
    loss_dev = compiled(ids.to("neuron"), labels=ids.to("neuron")).loss
    loss_dev.backward()
    torch.testing.assert_close(loss_dev.cpu(), loss_cpu, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), device_model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-3, atol=1e-5, msg=name)
    assert not trnsim.fallback_report(), trnsim.fallback_report()
