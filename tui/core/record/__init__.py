"""Recorded sessions: the recorder (a consumer of the event bus), the reader and replay source, the headless
summary of a recording, and profile bundles (export/import of a working setup)."""

from tui.core.record.format import FORMAT_VERSION, SUFFIX, RecordingHeader
from tui.core.record.markers import MARKER_KINDS, Marker
from tui.core.record.reader import Recording, RecordingError
from tui.core.record.recorder import Recorder, RecorderStats, new_header, recording_path
from tui.core.record.replay import ReplaySource

__all__ = ["FORMAT_VERSION", "MARKER_KINDS", "SUFFIX", "Marker", "Recorder", "RecorderStats", "Recording",
           "RecordingError", "RecordingHeader", "ReplaySource", "new_header", "recording_path"]
