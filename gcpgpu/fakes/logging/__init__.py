"""The emulator's Cloud Logging: entries.list over REST, answered from what local runs printed.

backend.py  the entries (every local run's captured lines, as each run describes them: a Vertex AI
            replica's ml_job entries, a cluster container's gcplogs ones, a VM program's log) with the
            fields the service stamps, and Logging's query language over them. It lives at
            `emulator.logging`.
rest.py     the wire: POST /v2/entries:list with resourceNames, filter, orderBy and paging.

Only local runs log here: nothing else in the emulator writes log entries.
"""
