"""What other programs print, each message parsed in one place.

A foreign message (the kernel's OOM kill, NVIDIA's Xid, Slurm's cancellation) is read by several readers: the
catalogue of event kinds counts it (:mod:`rlwatch.logs.kinds`), a log's ending names it (:mod:`rlwatch.logs.shapes`),
the kernel log source turns it into a host event (:mod:`rlwatch.sources.kernel`). When each wrote its own expression
they disagreed (an older driver's Xid line was an event but not a log's ending). Here each message has its one
expression, quoted from the source that prints it, and the readers import it:

- :mod:`.kernel`: the kernel's and NVIDIA's driver's reports (OOM kills and their summary, Xid, GPUs fallen off the
  bus, segfaults, general protection faults, fatal SIGBUS);
- :mod:`.slurm`: Slurm's records of how a job ended (OOM kills, cancellation, a node failure).

Ray's and torchrun's messages have modules of their own already, :mod:`rlwatch.logs.ray` and
:mod:`rlwatch.logs.torchrun_report`, which every reader imports.
"""
