"""Model-archive checks for job submission: the shared safety checks, as API errors.

Every refusal is raised on the archive's form field (`model` on /v2): 413
`archive_too_large` for an archive over the byte limit, otherwise 422 with the refusal's
code (`invalid_archive`, `too_many_files`, `unsafe_path`, `link_in_archive`,
`duplicate_entry`, `encrypted_entry`, `zip_bomb`, and `empty_archive` for one that holds
no file: the job's command would find nothing to run).
"""

from __future__ import annotations

from api.errors import Invalid, TooLarge
from storage.archive_safety import (
    ArchiveLimits,
    ArchiveRefused,
    ArchiveSummary,
    Source,
    check_archive,
)

__all__ = ["ArchiveLimits", "ArchiveSummary", "check_model_archive"]


def check_model_archive(
    source: Source, limits: ArchiveLimits, field: str = "model"
) -> ArchiveSummary:
    """Check a user's model zip (a path or a seekable binary file) before it is stored.

    A file object is left at the position it had, ready to be uploaded.
    """
    try:
        summary = check_archive(source, limits)
    except ArchiveRefused as refusal:
        kind = TooLarge if refusal.code == "archive_too_large" else Invalid
        raise kind(refusal.detail, code=refusal.code, field=field) from None
    if summary.files == 0:
        raise Invalid(
            "the model archive holds no file: zip the folder with your training code (the "
            "manifest's command runs in it), e.g. `dlaas train manifest.yml MODEL_DIR`",
            code="empty_archive",
            field=field,
        )
    return summary
