"""Models trained elsewhere, imported as ordinary versions (``headrace models import``).

One path for every source: a resolver (``sources``: a file; the MLflow resolver lives beside
it) hands over a local file or folder and its lineage; the format's importer (``formats``: one
module per format, in its registry) turns it into the files a scorer adapter serves and the
signature the codecs decode into; ``importing`` then probes it through that adapter, gates it on
a labelled sample like a trained version (``gating``) and publishes it with the store's own
protocol (manifest last, sha256 of every file, lineage in ``extra.import``).
"""

from __future__ import annotations

from headrace.imports.importing import ImportRequest, ImportResult, import_model
from headrace.imports.sources import ImportSource, from_file

__all__ = ["ImportRequest", "ImportResult", "ImportSource", "from_file", "import_model"]
