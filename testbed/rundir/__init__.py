"""The run-directory contract: what a run writes and how it is read back.

* :mod:`.names`: the layout, file names and modes; :mod:`.errors`: MetricsError, RunDirError
  (reading) and RunDirWriteError (writing);
* :mod:`.schema`: the checks (Check, Num, Int, Opt, ListOf, MapOf, Obj); :mod:`.schemas`: the
  schema of every record file;
* :mod:`.write`: every write of a run directory (atomic documents, the JSONL writers, the
  manifest, the job specs, the agents' files);
* :mod:`.damage`: problems found while reading, collected or raised; :mod:`.read`: bounded
  reads, JSONL, JSON, the manifest; :mod:`.tables`: samples and link counters in columns;
  :mod:`.load`: one transport's records (:class:`~.load.TransportRecords`);
* :mod:`.upgrade`: the manifest ``format`` and the one step that brings an older run's data
  to it when read.
"""
