"""Many hosts at once: every pod's exporter, read through one Prometheus server or straight from the exporters.

Both ways end in the same place: for each host, the rlwatch series of its newest sample, turned into one
:class:`FleetHost` row. Hosts that fail the same way are grouped by the signature of their last exception (the
signature is stable across hosts, see :mod:`rlwatch.logs.signatures`), so "the same crash on twelve pods" reads as one
line with twelve hosts under it, not twelve unrelated alarms.

Stale data never looks healthy. A host is stale when its data stopped arriving (Prometheus' scrape fails, so its
series end with a staleness marker; or the exporter does not answer) or when the data that arrives is old (the
exporter answers but the engine behind it stopped moving). A stale host keeps its last known values, marked, with
the age of its newest data.

Reading Prometheus takes three small queries per refresh, plus two per stale host: the current value of every
``rlwatch_`` series (staleness-aware, so a dead exporter's series and a resolved finding vanish at once), the
timestamps of the live hosts' last scrapes, and which hosts reported at all within a look-back window. For a host
that stopped, its ``rlwatch_info`` samples in the window give its last good scrape, and an instant query at exactly
that time gives its last known values. The active targets add the scrape error, and the hosts that never answered."""

from __future__ import annotations

from rlwatch.export.fleet.http import exporter_url, parse_exposition
from rlwatch.export.fleet.model import (
    FleetError,
    FleetException,
    FleetFinding,
    FleetGpu,
    FleetGroup,
    FleetHost,
    FleetProcess,
    FleetSnapshot,
    HostStatus,
    Labels,
    Sample,
    group_hosts,
)
from rlwatch.export.fleet.samples import host_from_samples
from rlwatch.export.fleet.sources import ExporterFleet, FleetSource, PrometheusFleet, make_fleet_source

__all__ = [
    "ExporterFleet",
    "FleetError",
    "FleetException",
    "FleetFinding",
    "FleetGpu",
    "FleetGroup",
    "FleetHost",
    "FleetProcess",
    "FleetSnapshot",
    "FleetSource",
    "HostStatus",
    "Labels",
    "PrometheusFleet",
    "Sample",
    "exporter_url",
    "group_hosts",
    "host_from_samples",
    "make_fleet_source",
    "parse_exposition",
]
