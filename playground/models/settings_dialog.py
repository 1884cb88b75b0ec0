"""The model settings dialog: how a GGUF file is opened (which engine, context size, CPU threads, GPU layers).
It only lays the fields out; values() gives what engine.load_model takes (None: the engine's default)."""

from PySide6.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QSpinBox, QVBoxLayout

from engine import DEFAULT_THREADS_RULE, default_threads, max_threads

BACKEND_LABELS = {"llama.cpp": "llama.cpp (in process)", "numpy": "numpy (reference engine)"}
THREADS_TIP = (
    "CPU threads llama.cpp computes with. The default leaves one core free: ggml's threads spin while "
    "they wait for each other, so a count that fills the machine runs many times slower as soon as "
    "anything else (the window itself) needs a core; on 2 cores, 1 thread is the faster"
)
MAX_CONTEXT = 1 << 20  # the engine refuses more than the file's own context, naming both


def _spin(name: str, low: int, high: int, default_text: str, tip: str) -> QSpinBox:
    """A spin box whose lowest value stands for the engine's default, shown as `default_text`."""
    box = QSpinBox(objectName=name)
    box.setRange(low, high)
    box.setSpecialValueText(default_text)
    box.setToolTip(tip)
    return box


class ModelSettingsDialog(QDialog):
    def __init__(self, found, options: dict, parent=None):
        """found: the engine.FoundModel to open; options: the remembered load options to start from."""
        super().__init__(parent, objectName="modelSettingsDialog")
        self.setWindowTitle(f"Open {found.name}")
        self.setMinimumWidth(460)
        self.engine = QComboBox(objectName="engineChoice")
        for backend in found.backends:
            self.engine.addItem(BACKEND_LABELS[backend], backend)
        self.engine.setToolTip("llama.cpp runs every architecture it knows, on the quantized weights; the numpy "
                               "engine reads llama and qwen2 files in float32, every step in plain numpy")  # fmt: skip
        self.context = _spin("contextSize", 0, MAX_CONTEXT, "the file's own (llama.cpp: at most 8,192)",
                             "positions the model can see (the prompt and what it writes)")  # fmt: skip
        threads_default = f"default: {default_threads()} ({DEFAULT_THREADS_RULE})"
        self.threads = _spin("cpuThreads", 0, max_threads(), threads_default, THREADS_TIP)  # the engine's limits
        self.gpu_layers = _spin(
            "gpuLayers",
            -1,
            9999,
            "all",
            "layers llama.cpp offloads to a GPU (0: none; a CPU-only llama.cpp runs them all on the CPU)",
        )

        index = self.engine.findData(options.get("backend"))
        self.engine.setCurrentIndex(max(index, 0))
        self.context.setValue(options.get("context_length") or 0)
        self.threads.setValue(options.get("threads") or 0)
        self.gpu_layers.setValue(options.get("gpu_layers", 0))
        self.engine.currentIndexChanged.connect(self._follow_engine)
        self._follow_engine()

        size = f"{found.size / 2**20:,.0f} MiB"
        about = QLabel(f"{found.path}\n{found.architecture or 'unknown architecture'}, {size}", objectName="modelAbout")
        about.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Engine", self.engine)
        form.addRow("Context size", self.context)
        form.addRow("CPU threads", self.threads)
        form.addRow("GPU layers", self.gpu_layers)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(about)
        layout.addLayout(form)
        layout.addWidget(buttons)

    def backend(self) -> str | None:
        return self.engine.currentData()

    def values(self) -> dict:
        """The load options: backend, context_length, and for llama.cpp threads and gpu_layers."""
        options = {"backend": self.backend(), "context_length": self.context.value() or None}
        if self.backend() == "llama.cpp":
            options.update(threads=self.threads.value() or None, gpu_layers=self.gpu_layers.value())
        return options

    def _follow_engine(self) -> None:
        """Threads and GPU layers are llama.cpp's: the numpy engine takes neither."""
        llama = self.backend() == "llama.cpp"
        self.threads.setEnabled(llama)
        self.gpu_layers.setEnabled(llama)
