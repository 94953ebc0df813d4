"""The ground floor: argument checks (``BookError``), atomic file writes, the
environment (device, seeds, Colab), timing, RNG states and the JSON run records.
"""

from transformer_book.util.env import (
    DEVICE_ORDER,
    cpu_name,
    device_name,
    environment_report,
    format_report,
    get_device,
    in_colab,
    require_device,
    set_seed,
    torch_threads,
)
from transformer_book.util.files import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    atomic_writer,
    fsync_path,
    new_directory,
    require_writable,
    sha256_file,
)
from transformer_book.util.records import (
    command_line,
    git_commit,
    hardware_info,
    read_records,
    utc_timestamp,
    write_record,
)
from transformer_book.util.rng import (
    capture_rng_state,
    restore_rng_state,
)
from transformer_book.util.timing import (
    CLOCKS,
    Stopwatch,
    best_time,
    measure,
    medians,
)
from transformer_book.util.validation import (
    BookError,
    bad_input,
    require,
    require_bool,
    require_finite_tensor,
    require_int,
    require_number,
    require_one_of,
    require_positive_int,
    require_positive_number,
    require_probability,
    require_tensor,
)

__all__ = [
    "CLOCKS", "DEVICE_ORDER", "BookError", "Stopwatch", "atomic_write_bytes",
    "atomic_write_json", "atomic_write_text", "atomic_writer", "bad_input", "best_time",
    "capture_rng_state", "command_line", "cpu_name", "device_name", "environment_report",
    "format_report", "fsync_path", "get_device", "git_commit", "hardware_info", "in_colab",
    "measure", "medians", "new_directory", "read_records", "require", "require_bool",
    "require_device", "require_finite_tensor", "require_int", "require_number",
    "require_one_of", "require_positive_int", "require_positive_number", "require_probability",
    "require_tensor", "require_writable", "restore_rng_state", "set_seed", "sha256_file",
    "torch_threads", "utc_timestamp", "write_record",
]
