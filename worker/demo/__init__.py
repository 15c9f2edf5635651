"""The `scorestream demo`: the worker on an embedded broker, fed the bundled example stream.

One module per job: `settings` (the demo's configuration, tuned for the embedded broker),
`example_stream` (the bundled stream, re-timed to the present and cut into windows),
`runner` (one run: broker, topics, worker, replay, waiting until every record is
accounted for) and `console` (what the terminal shows meanwhile and at the end). The
`scorestream demo` command (`worker.commands.demo`) only connects them to its arguments.
"""
