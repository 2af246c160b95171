"""The farm's progress: one actor per cluster, read a piece at a time (vak_context.farm.progress)."""

from __future__ import annotations

from vak_context.farm.progress import Answer, FarmProgressActor, StartsReader


class Recording:
    """``ask`` over a plain FarmProgressActor, keeping the ``n`` of every ask (None: the actor is down)."""

    def __init__(self, actor: FarmProgressActor | None, run_id: str = "run") -> None:
        self.actor, self.run_id = actor, run_id
        self.asked: list[int] = []

    def __call__(self, n: int) -> Answer | None:
        self.asked.append(n)
        return None if self.actor is None else self.actor.since(self.run_id, n)


def test_a_reader_asks_only_for_the_starts_it_has_not_read() -> None:
    """Each poll asks from the count already read, gets only new starts (a retry shows as a second node),
    and says whether there were any; another run's starts never show."""
    actor = FarmProgressActor()
    ask = Recording(actor)
    reader = StartsReader("run")
    actor.started("run", "replay/m/a", "n1")
    actor.started("other", "replay/m/z", "n9")
    assert reader.poll(ask) is True and reader.starts == {"replay/m/a": ["n1"]}
    assert reader.poll(ask) is False
    actor.started("run", "replay/m/b", "n1")
    actor.started("run", "replay/m/a", "n2")  # retried elsewhere
    assert reader.poll(ask) is True
    assert reader.starts == {"replay/m/a": ["n1", "n2"], "replay/m/b": ["n1"]}
    assert ask.asked == [0, 1, 1]


def test_a_restarted_actor_is_read_from_its_start_and_what_was_read_stays() -> None:
    """An actor that cannot answer leaves the starts as they are; a restarted one (a new token, an empty
    log) is read from 0, its starts added to what was read before, none twice."""
    reader = StartsReader("run")
    first = FarmProgressActor()
    first.started("run", "replay/m/a", "n1")
    first.started("run", "replay/m/b", "n1")
    reader.poll(Recording(first))
    assert reader.poll(Recording(None)) is False and reader.starts == {"replay/m/a": ["n1"], "replay/m/b": ["n1"]}
    second = FarmProgressActor()
    second.started("run", "replay/m/a", "n2")
    ask = Recording(second)
    assert reader.poll(ask) is True and ask.asked == [2, 0]
    assert reader.starts == {"replay/m/a": ["n1", "n2"], "replay/m/b": ["n1"]}
    second.started("run", "replay/m/c", "n2")
    assert reader.poll(ask) is True and ask.asked[-1] == 1 and reader.starts["replay/m/c"] == ["n2"]


def test_forget_drops_one_runs_log() -> None:
    """``forget`` drops the run's log and only that run's."""
    actor = FarmProgressActor()
    actor.started("a", "u", "n")
    actor.started("b", "u", "n")
    actor.forget("a")
    assert actor.since("a", 0)[1] == [] and actor.since("b", 0)[1] == [("u", "n")]


