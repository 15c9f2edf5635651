"""Every change the worker makes to Faust, aiokafka and mode, installed by one `install`.

What each module fixes (upstream issue, where one was found):
- `seek_guard`: records fetched while a rebalance seeks are lost (none found; related:
  faust-streaming/faust#216, #221).
- `eager_delivery`: four tasks per fetched record (none found; related:
  faust-streaming/faust#229).
- `fetch_wait`: on Tansu every hop waits Faust's fixed 1.5 s fetch wait (none found).
- `commit_bound`: a commit of vanished partitions hangs rebalances and the stop
  (aio-libs/aiokafka#1095).
- `changelog_ends`: Tansu's wrong ListOffsets ends stall or cut table recovery (none
  found).
- `lean_monitor`: Faust's per-record statistics that nothing reads (none found).
- `record_batches`: aiokafka's per-record `send` cost; reads `_partition` (none found;
  related: aio-libs/aiokafka#216).
- `prompt_batches`: `take_events` cannot end a batch early, so a marker that closes a
  window waited out the window stage's batch wait (none found); reads the channel's
  `queue` so that a backlog is not cut into a batch per marker.
- `held_batches`: `take_events` acknowledges a batch when the next is taken, so the score
  stage could not begin the next batch while one finishes (none found).
- `table_start`: the consumer subscribes (asks to join its group) 1 s after the table
  manager starts, which sleeps before registering the tables (none found).
- `no_auto_create`: a worker whose topics vanished re-created them with the broker's
  default layout by asking for their metadata (none found); installed by the `worker`
  command for its process.
- `internals`: what the stages read of Faust's private state (related:
  faust-streaming/faust#497).

Each module's docstring says what it patches and why. `compatibility.check` runs first:
outside the tested versions, or with an attribute gone, the worker does not start.
"""

from __future__ import annotations

import faust

from topics.provision import bootstrap_servers
from worker.config import Settings
from worker.ops.kafka_security import aiokafka_options
from worker.stream.faust_patches.changelog_ends import exact_highwaters
from worker.stream.faust_patches.commit_bound import bound_commits
from worker.stream.faust_patches.compatibility import IncompatibleLibraries, check
from worker.stream.faust_patches.eager_delivery import deliver_eagerly
from worker.stream.faust_patches.fetch_wait import set_fetch_max_wait
from worker.stream.faust_patches.lean_monitor import LeanMonitor
from worker.stream.faust_patches.no_auto_create import forbid_topic_auto_creation
from worker.stream.faust_patches.seek_guard import guard_seek
from worker.stream.faust_patches.table_start import register_tables_at_once


def install(app: faust.App, settings: Settings) -> None:
    """Check the libraries (`IncompatibleLibraries` if they do not match), then patch
    `app` before it starts: call it once the app's agents are defined (the seek guard
    covers the topics they read)."""
    check()
    stream = settings.stream
    app.monitor = LeanMonitor()
    consumer = app.consumer
    if stream.exact_changelog_ends:
        consumer.highwaters = exact_highwaters(  # type: ignore[method-assign,assignment]
            consumer.highwaters, bootstrap_servers(app_broker(app)), aiokafka_options(settings)
        )
    guard_seek(consumer, agent_topics(app))
    deliver_eagerly(consumer)
    # A commit slower than a rebalance may take would cost the group membership anyway.
    bound_commits(consumer, stream.rebalance_timeout)
    if stream.fetch_max_wait is not None:
        set_fetch_max_wait(consumer, stream.fetch_max_wait)
    register_tables_at_once(app.tables)


def app_broker(app: faust.App) -> str:
    """The app's broker URLs in Faust's `kafka://h:p;kafka://h2:p2` spelling."""
    return ";".join(str(url) for url in app.conf.broker)


def agent_topics(app: faust.App) -> set[str]:
    """The names of the topics the app's agents read."""
    return {agent.channel.get_topic_name() for agent in app.agents.values()}


__all__ = ["IncompatibleLibraries", "check", "forbid_topic_auto_creation", "install"]
