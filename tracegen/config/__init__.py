"""The job format: YAML / preset / dict -> frozen dataclasses, validated with one-line errors.

Sections: model, parallelism, cluster, fabric, nccl, network, output. Every key is declared once
(type, default, range, doc); a YAML file names only what differs. Megatron argument names are
accepted as aliases. A module per idea, each importing only those above it in this list:

  keys        every key's declaration, a module per section (keys/model.py, ...; keys/declare.py: key())
  schema      the tables read off the declarations, the limits table and the JSON Schema text
  sections    the sections' dataclasses and the sizes derived from them
  values      one value: display in messages, type and range checks, time and integer text
  yaml_files  the strict, capped YAML reader
  paths       paths a job names, made absolute from the file that names them
  presets     the shipped presets (package data)
  rules       validation between keys
  inert       keys another key's value makes inert
  load        load_job, job_from_dict, --set, with_options
  describe    docs/limits.md and the job JSON Schema (`python -m tracegen.config`)

This package re-exports the names the rest of tracegen uses. May import: tracegen's shared
modules (errors, shipped). Must not import any other stage.
"""
from __future__ import annotations

from .describe import job_schema_path, job_schema_text, limits_doc, main
from .inert import INERT, inert_keys
from .load import job_from_dict, job_to_dict, load_job, with_options
from .paths import job_relative
from .presets import list_presets
from .rules import table_formats, validate
from .keys.declare import DTYPE_BYTES, GPU_MEMORY_BYTES, GPU_PEAK_TFLOPS
from .schema import ALIASES, bounds, limits_markdown, limits_rows
# The tables under their old private names: tests read them so (tests/test_bad_input.py, test_fuzz.py).
from .schema import CHOICES as _CHOICES, RANGES as _RANGES, SCALARS as _SCALARS, TYPES as _TYPES
from .sections import (SECTIONS, Cluster, FabricConfig, Job, Model, Nccl, Network, Output, Parallelism,
                       grad_elem_bytes)
from .values import (check_field, parse_start_time, parse_time_window, show, show_path, show_tail,
                     small_int)
from .yaml_files import read_yaml_file
from ..errors import ConfigError

__all__ = [
    "ALIASES", "DTYPE_BYTES", "GPU_MEMORY_BYTES", "GPU_PEAK_TFLOPS", "INERT", "SECTIONS", "Cluster",
    "ConfigError", "FabricConfig", "Job", "Model", "Nccl", "Network", "Output", "Parallelism",
    "bounds", "check_field", "grad_elem_bytes", "inert_keys", "job_from_dict", "job_relative",
    "job_schema_path", "job_schema_text", "job_to_dict", "limits_doc", "limits_markdown", "limits_rows",
    "list_presets", "load_job", "main", "parse_start_time", "parse_time_window", "read_yaml_file", "show",
    "show_path", "show_tail", "small_int", "table_formats", "validate", "with_options",
    "_CHOICES", "_RANGES", "_SCALARS", "_TYPES",
]
