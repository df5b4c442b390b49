"""Policies a loop evaluates beside the agent's own deterministic one, on the same episodes.

    from platonic_rl.agents.qrl_policies import PolicySpec
    eval_policies = {"lookahead": PolicySpec.of("lookahead", hold_steps=5)}
    agent, rows = train_online(agent, config, eval_policies=eval_policies)    # rows: eval_success_lookahead
    agent, rows = train_on_device(agent_config, env, config, eval_policies=eval_policies)

``eval_policies`` maps a name to ``build(agent) -> policy``, anything with the agents' acting signature
(:mod:`platonic_rl.agents.contract`) built from the agent being trained at each evaluation (for QRL, a
:class:`~platonic_rl.agents.qrl_policies.PolicySpec`). Each one is evaluated on the episodes of ``eval_success`` and
logged as ``eval_success_<name>``. What the policies are is part of a run's settings: a build with ``as_dict()`` (a
``PolicySpec``) is recorded by its settings, any other by its qualified name.

A build whose ``dataset_states_wanted`` is n > 0 (a waypoint policy's ``PolicySpec``) is called as ``build(agent,
states)`` with n states drawn from the loop's replay buffer at that evaluation: the policy plans over the replay
buffer (Search on the Replay Buffer, Eysenbach et al., 2019), as offline it plans over the dataset.

    eval_policies = {"graph_waypoints": PolicySpec.of("graph_waypoints", num_waypoints=500)}
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping

NAME = re.compile(r"[A-Za-z0-9_.-]+")


def check_eval_policies(eval_policies: Mapping[str, Callable[[Any], Any]] | None
                        ) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    """``eval_policies`` as ``((name, build), ...)`` (hashable when the builds are), after checking the names and
    that every build is callable; ``None`` is none."""
    if eval_policies is None:
        return ()
    if not isinstance(eval_policies, Mapping):
        raise TypeError(f"eval_policies must map names to build(agent) -> policy, got {type(eval_policies).__name__}")
    for name, build in eval_policies.items():
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ValueError(f"eval_policies: names must be letters, digits, '_', '.' or '-' (they become the "
                             f"metric eval_success_<name>), got {name!r}")
        if not callable(build):
            raise TypeError(f"eval_policies[{name!r}] must be callable, build(agent) -> policy, got "
                            f"{type(build).__name__}")
        wanted = getattr(build, "dataset_states_wanted", 0)
        if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 0:
            raise ValueError(f"eval_policies[{name!r}].dataset_states_wanted must be an int >= 0 (the replay "
                             f"buffer states it is built from), got {wanted!r}")
    return tuple(eval_policies.items())


def build_policy(build: Callable[..., Any], agent: Any, buffer: Any, key: Any) -> Any:
    """``build``'s policy for ``agent``: ``build(agent)``, or ``build(agent, states)`` with its
    ``dataset_states_wanted`` states of ``buffer`` (an :class:`~platonic_rl.envs.replay.EpisodeBuffer`) drawn with
    ``key``."""
    wanted = getattr(build, "dataset_states_wanted", 0)
    return build(agent, buffer.sample_states(key, wanted)) if wanted else build(agent)


def metric_name(name: str) -> str:
    """The metric a policy's success is logged as."""
    return f"eval_success_{name}"


def describe(eval_policies: tuple[tuple[str, Callable[[Any], Any]], ...]) -> dict[str, Any]:
    """The policies as JSON-able run settings: ``build.as_dict()`` where it has one, else its qualified name."""
    return {name: build.as_dict() if callable(getattr(build, "as_dict", None))
            else getattr(build, "__qualname__", type(build).__name__) for name, build in eval_policies}
