"""Small rollout rounds built in code, for the rollout tests."""
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
