"""REINFORCE and PPO updates and checkpoints on torch_xla's device, against the eager CPU path.

Bounds: both paths compute in float32 (bfloat16 is chosen on a TPU only), but XLA fuses and
reorders the reductions, so a result agrees with the CPU's to float32 rounding, not bit for bit. A
plain SGD step is the learning rate times the (clipped) gradient, so the difference of the two steps
over the step itself measures how far the gradients agree. float32 rounds each operation by at most
6e-8 of its value; through sums of a few thousand terms and a few dozen layers' products that grows
to about 1e-5 at most, and 1e-4 leaves room for it (3.7e-6 was seen for REINFORCE, 3.6e-6 for PPO,
on an AMD EPYC). A wrong mask, a lost token or a missing term moves it by order one.
"""

import pytest
import torch

torch_xla = pytest.importorskip("torch_xla")
import torch_xla.debug.metrics as met  # noqa: E402

from tutorial_lib.lm.models import load_policy  # noqa: E402
from tutorial_lib.rl.ppo import PPO, PPOSettings  # noqa: E402
from tutorial_lib.rl.reinforce import Reinforce, ReinforceSettings  # noqa: E402
from tutorial_lib.rl.rollout import TurnBatch, collate_turns, collect  # noqa: E402
from tutorial_lib.runtime.device import XLA_SHAPE_MULTIPLE, get_device, shape_multiple  # noqa: E402
from tutorial_lib.runtime.tracking import load_checkpoint, save_checkpoint  # noqa: E402

from ..conftest import SMALL  # noqa: E402

TTT = dict(opponent="random", agent_mark="alternate")
ALGORITHMS = {"reinforce": (Reinforce, ReinforceSettings), "ppo": (PPO, PPOSettings)}


def settings(algo: str, **changes):
    """One update of a few games' turns in one pass (one minibatch, one epoch for PPO): each shape
    is a graph XLA compiles, in seconds on a CPU, so the suite keeps to a few."""
    extra = {"minibatch_turns": 64, "ppo_epochs": 1} if algo == "ppo" else {}
    return ALGORITHMS[algo][1](**{"iterations": 1, "turns_per_iteration": 12, "num_envs": 4, "microbatch_turns": 64,
                                  "learning_rate": 1e-2, "env_options": TTT, **extra, **changes})


def policies():
    """The same tiny model on the CPU and on the XLA device."""
    cpu = load_policy("tiny", tiny_config=SMALL, device="cpu")
    xla = load_policy("tiny", tiny_config=SMALL, device="xla")
    xla.model.load_state_dict(cpu.model.state_dict())
    assert xla.model.get_output_embeddings().weight is xla.model.get_input_embeddings().weight  # still tied
    return cpu, xla


def with_sgd(algorithm):
    """The algorithm's optimiser swapped for SGD at its rate: a step linear in the gradient."""
    params = [p for group in algorithm.optimizer.param_groups for p in group["params"]]
    algorithm.optimizer = torch.optim.SGD(params, lr=algorithm.settings.learning_rate)
    return algorithm


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_an_update_on_xla_agrees_with_the_cpu(tiny_cache, algo):
    cpu, xla = policies()
    torch.manual_seed(0)
    rollout = collect(cpu, "tictactoe", range(4), env_options=TTT, num_envs=4)  # one batch for both
    start = flat(cpu.model)
    results = {}
    for name, policy in (("cpu", cpu), ("xla", xla)):
        torch.manual_seed(1)  # PPO shuffles its minibatches: the same order on both
        algorithm = ALGORITHMS[algo][0](policy, settings(algo))  # PPO's value head starts at zero on both
        results[name] = with_sgd(algorithm).update(rollout)
    step_cpu, step_xla = flat(cpu.model) - start, flat(xla.model) - start
    assert step_cpu.norm() > 0  # the update moved the weights
    assert (step_xla - step_cpu).norm() <= 1e-4 * step_cpu.norm()
    for metric in ("grad_norm", "entropy") if algo == "reinforce" else ("grad_norm", "entropy", "policy_loss", "value_loss"):
        assert results["xla"][metric] == pytest.approx(results["cpu"][metric], rel=1e-4, abs=1e-6)


def turns_of_lengths(prompt_lengths, action_length=3):
    """Hand-made turns whose prompts differ in length: the widths a game's batches take."""
    from tutorial_lib.lm.policies import Sample

    return [Sample("", [5 + i % 7 for i in range(n)], [8, 9, 10][:action_length], [-1.0] * action_length)
            for n in prompt_lengths]


def compiled_graphs() -> int:
    return met.counter_value("UncachedCompile") or 0


def reinforce_steps(policy, batches_of_lengths, multiple=None):
    """One REINFORCE step per batch; the graphs compiled so far, after each. ``multiple``: the
    batches' width multiple, by default the library's own for the device (as ``prepare`` pads)."""
    reinforce = Reinforce(policy, settings("reinforce", microbatch_turns=4))
    multiple = multiple or shape_multiple(next(policy.model.parameters()).device)
    counts = []
    for lengths in batches_of_lengths:
        batch = TurnBatch.of(turns_of_lengths(lengths), policy.tokenizer.pad_token_id, multiple=multiple,
                             advantages=torch.tensor([1.0, -1.0, 0.5, -0.5]))
        reinforce.step(batch)
        counts.append(compiled_graphs())
    return counts


def test_updates_compile_no_new_graph_after_the_first(tiny_cache):
    """Each update's prompts are of other lengths, all within one bucket of ``XLA_SHAPE_MULTIPLE``:
    after the warm-up (the first update compiles the forward and backward pass, the second the
    optimiser step with the moments AdamW created in the first), no update compiles anything.
    Without the buckets the same batches compile anew each time, which is what this test exists to
    catch; so would a graph that grew from step to step (no cut after the optimiser step)."""
    _, xla = policies()
    lengths = [[20, 23, 17, 25], [21, 18, 26, 19], [24, 22, 16, 27], [19, 28, 21, 18]]
    widths = [collate_turns(turns_of_lengths(row), 0)["input_ids"].shape[1] for row in lengths]
    assert len(set(widths)) == 4  # every batch of its own width ...
    assert len({collate_turns(turns_of_lengths(row), 0, XLA_SHAPE_MULTIPLE)["input_ids"].shape for row in lengths}) == 1
    counts = reinforce_steps(xla, lengths)  # ... and of one shape in the library's bucket
    assert counts[2:] == [counts[1]] * 2, f"graphs compiled, counted after each update: {counts}"
    unbucketed = reinforce_steps(xla, lengths, multiple=1)
    assert unbucketed[3] > unbucketed[2] > unbucketed[1], f"widths that change every update compile every update: {unbucketed}"


def test_a_checkpoint_written_on_xla_loads_on_the_cpu_and_back(tiny_cache, tmp_path):
    cpu, xla = policies()
    reinforce = Reinforce(xla, settings("reinforce"))
    reinforce.update(collect(cpu, "tictactoe", range(4), env_options=TTT, num_envs=4))  # the optimiser has state now
    save_checkpoint(tmp_path / "ckpt", xla.model, reinforce.optimizer, step=1)
    on_xla = {k: v.cpu() for k, v in xla.model.state_dict().items()}

    back_on_cpu = Reinforce(cpu, settings("reinforce"))
    assert load_checkpoint(tmp_path / "ckpt", cpu.model, back_on_cpu.optimizer)[0] == 1
    assert all(torch.equal(cpu.model.state_dict()[k], v) for k, v in on_xla.items())
    moment = next(iter(back_on_cpu.optimizer.state.values()))["exp_avg"]
    assert moment.device.type == "cpu" and moment.abs().sum() > 0

    _, again = policies()
    on_xla_again = Reinforce(again, settings("reinforce"))
    load_checkpoint(tmp_path / "ckpt", again.model, on_xla_again.optimizer)
    assert next(again.model.parameters()).device == get_device("xla")
    assert all(torch.equal(again.model.state_dict()[k].cpu(), v) for k, v in on_xla.items())
    assert next(iter(on_xla_again.optimizer.state.values()))["exp_avg"].device.type == "xla"


def test_memory_free_on_the_xla_device_is_the_hosts_on_a_cpu():
    """A TPU reports its own memory (``get_memory_info``); XLA's CPU device cannot, and training
    there is sized to the host's memory, as on the CPU, rather than failing."""
    from tutorial_lib.runtime.memory_plan import free_memory_bytes

    free = free_memory_bytes(get_device("xla"))
    assert 0 < free and abs(free - free_memory_bytes("cpu")) < 0.2 * free_memory_bytes("cpu")
