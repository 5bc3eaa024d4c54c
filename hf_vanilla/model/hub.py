"""What a saved or pushed checkpoint carries beyond transformers' own files: the pipeline's code and the card.

transformers copies only the model's and config's code; `Pipeline.save_pretrained` copies a pipeline's. So
that every directory transformers writes (save_pretrained, Trainer checkpoints, push_to_hub) runs
`pipeline(task, model=directory, trust_remote_code=True)` and keeps the card's metadata, the model's
save_pretrained and push_to_hub add them.
"""

import inspect
import os
import shutil
from pathlib import Path

from huggingface_hub import ModelCard
from transformers.dynamic_module_utils import get_cached_module_file, get_relative_import_files
from transformers.utils import HF_MODULES_CACHE, cached_file, logging

from .configuration_vanilla import VanillaTransformerConfig

logger = logging.get_logger(__name__)
CARD_FILE = "README.md"


def pipeline_code_files(config: VanillaTransformerConfig, model_code: Path) -> list[Path]:
    """The files of the pipelines `config.custom_pipelines` names, with the files they import relatively.

    Found beside `model_code` where the model runs from this package; else (a model loaded with
    trust_remote_code, whose code transformers copied without the pipeline's) in the checkpoint it was loaded
    from, fetched as transformers fetches remote code.
    """
    files = []
    for entry in config.carried_pipelines.values():
        module_file = f"{entry['impl'].rpartition('.')[0]}.py"
        pipeline_code = model_code.with_name(module_file)
        if not pipeline_code.is_file():
            try:
                pipeline_code = Path(HF_MODULES_CACHE) / get_cached_module_file(config.name_or_path, module_file)
            except (OSError, ValueError) as err:
                logger.warning(
                    "the config names the pipeline %s, but its code was not found beside the model's or in %r "
                    "(%s): the saved directory will not run it",
                    entry["impl"],
                    config.name_or_path,
                    err,
                )
                continue
        files += [pipeline_code, *map(Path, get_relative_import_files(pipeline_code))]
    return files


def checkpoint_card(config: VanillaTransformerConfig) -> Path | None:
    """The model card (README.md) of the checkpoint the model was loaded from, a directory or a Hub repo; None if
    it has none or the model was not loaded from one."""
    if not config.name_or_path:
        return None
    card = cached_file(
        config.name_or_path,
        CARD_FILE,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )
    return Path(card) if card else None


class PipelineCodeAndCardMixin:
    """For a PreTrainedModel (listed before it): save_pretrained and push_to_hub also write the pipeline code the
    config names and the model card of the checkpoint the model was loaded from."""

    def save_pretrained(self, save_directory: str | os.PathLike, *args, is_main_process: bool = True, **kwargs):
        """transformers' save, plus the pipeline code and the checkpoint's card; a card `save_directory` already
        has is kept."""
        super().save_pretrained(save_directory, *args, is_main_process=is_main_process, **kwargs)
        if not is_main_process:
            return
        for code_file in pipeline_code_files(self.config, Path(inspect.getfile(type(self)))):
            shutil.copyfile(code_file, Path(save_directory) / code_file.name)
        card = checkpoint_card(self.config)
        if card is not None and not (Path(save_directory) / CARD_FILE).exists():
            shutil.copyfile(card, Path(save_directory) / CARD_FILE)

    def _upload_modified_files(self, working_dir: str | os.PathLike, *args, **kwargs):
        """`push_to_hub` writes the Hub's card, or a stub one, over ours just before it uploads: put back the
        checkpoint's card (languages, license, task, dataset, scores), with the tags transformers added. The card
        is the checkpoint's, made when it was saved (`hf_vanilla.checkpoints.cards`); nothing here writes one. This
        private method is the only step between transformers' card and the upload."""
        card_file = checkpoint_card(self.config)
        if card_file is not None:
            card = ModelCard.load(card_file)
            pushed = Path(working_dir) / CARD_FILE
            added_tags = ModelCard.load(pushed).data.tags if pushed.exists() else None
            card.data.tags = list(dict.fromkeys([*(card.data.tags or []), *(added_tags or [])])) or None
            card.save(pushed)
        return super()._upload_modified_files(working_dir, *args, **kwargs)
