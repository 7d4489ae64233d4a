"""Small rollout rounds built in code, for the rollout tests."""
from hypothesis import strategies as st

from pipeplan.formulations.rollout.problem import EngineModel, RolloutProblem, TrainerModel


def small_round(responses, prompts=None, *, seqs=4, cap=None, c0=0.01, c1=0.0, c2=0.0, prefill=0.0,
                kv_mode="reserve", U=1, per_token=0.001, optimizer=0.5, budget=10_000, arrival=(), name="small",
                **engine_extra) -> RolloutProblem:
    prompts = prompts or [2] * len(responses)
    cap = cap or sum(p + sum(r) for p, r in zip(prompts, responses))
    engine = EngineModel(max_num_seqs=seqs, kv_capacity_tokens=cap, c0_s=c0, c1_s=c1, c2_s=c2, prefill_s=prefill,
                         kv_mode=kv_mode, **engine_extra)
    trainer = TrainerModel(groups_per_update=U, token_budget=budget, s_per_token=per_token, s_per_microbatch=0.1,
                           optimizer_step_s=optimizer, publish_s=1.0)
    return RolloutProblem(name, tuple(prompts), tuple(tuple(r) for r in responses), engine, trainer,
                          arrival=tuple(arrival), source=name)


@st.composite
def random_rounds(draw):
    """Small random rounds of every engine mode and term (hypothesis), for the bound tests."""
    R, K = draw(st.integers(1, 5)), draw(st.integers(1, 3))
    responses = [[draw(st.integers(0, 25)) for _ in range(K)] for _ in range(R)]
    prompts = [draw(st.integers(1, 10)) for _ in range(R)]
    need = max(prompts) + max(max(r) for r in responses)
    return small_round(responses, prompts, seqs=draw(st.integers(1, 5)), cap=need + draw(st.integers(0, 60)),
                       c0=draw(st.sampled_from([0.01, 0.02])), c1=draw(st.sampled_from([0.0, 0.001])),
                       c2=draw(st.sampled_from([0.0, 1e-4])), prefill=draw(st.sampled_from([0.0, 0.003])),
                       kv_mode=draw(st.sampled_from(["reserve", "on_demand"])), U=draw(st.integers(1, R)),
                       arrival=draw(st.permutations(range(R * K))),
                       per_token=draw(st.sampled_from([0.0, 0.001, 0.01])),
                       optimizer=draw(st.sampled_from([0.0, 0.05, 0.5])), budget=draw(st.sampled_from([40, 10_000])),
                       retract_headroom_steps=draw(st.sampled_from([1, 20])))
