"""What a saved or pushed checkpoint carries beyond transformers' own files: the pipeline's code and the card.

transformers copies only the model's and config's code; `Pipeline.save_pretrained` copies a pipeline's. So
that every directory transformers writes (save_pretrained, Trainer checkpoints, push_to_hub) runs
`pipeline(task, model=directory, trust_remote_code=True)` and keeps the card's metadata, the model's
save_pretrained and push_to_hub add them.
"""

import dataclasses
import inspect
import os
import shutil
import tempfile
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi, ModelCard, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from transformers.dynamic_module_utils import get_cached_module_file, get_relative_import_files
from transformers.utils import HF_MODULES_CACHE, logging
from transformers.utils.hub import create_and_tag_model_card

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
                cached = get_cached_module_file(config.name_or_path, module_file)
                pipeline_code = Path(HF_MODULES_CACHE) / cached
            except (OSError, ValueError) as err:
                logger.warning(
                    "the config names the pipeline %s, but its code was not found beside the model's or in "
                    "%r (%s): the saved directory will not run it",
                    entry["impl"],
                    config.name_or_path,
                    err,
                )
                continue
        files += [pipeline_code, *map(Path, get_relative_import_files(pipeline_code))]
    return files


def checkpoint_card(config: VanillaTransformerConfig) -> Path | None:
    """The model card (README.md) of the checkpoint the model was loaded from, a directory or a Hub repo; None
    if it has none, the Hub cannot be reached and holds no cached copy, or the model was not loaded from
    one."""
    if not config.name_or_path:
        return None
    if os.path.isdir(config.name_or_path):
        card = Path(config.name_or_path) / CARD_FILE
        return card if card.is_file() else None
    try:
        return Path(hf_hub_download(config.name_or_path, CARD_FILE))
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise  # a name that is no checkpoint is the caller's mistake, not a missing card
    except (EntryNotFoundError, HfHubHTTPError):
        return None


class PipelineCodeAndCardMixin:
    """For a PreTrainedModel (listed before it): save_pretrained and push_to_hub also write the pipeline code
    the config names and the model card of the checkpoint the model was loaded from."""

    def save_pretrained(
        self, save_directory: str | os.PathLike, *args, is_main_process: bool = True, **kwargs
    ):
        """transformers' save, plus the pipeline code and the checkpoint's card; a card `save_directory`
        already has is kept."""
        super().save_pretrained(save_directory, *args, is_main_process=is_main_process, **kwargs)
        if not is_main_process:
            return
        for code_file in pipeline_code_files(self.config, Path(inspect.getfile(type(self)))):
            shutil.copyfile(code_file, Path(save_directory) / code_file.name)
        card = checkpoint_card(self.config)
        if card is not None and not (Path(save_directory) / CARD_FILE).exists():
            shutil.copyfile(card, Path(save_directory) / CARD_FILE)

    def push_to_hub(self, repo_id: str, **options):
        """transformers' push_to_hub (same options), in one commit, with the checkpoint's card (languages,
        license, task, dataset, scores) and the tags transformers gives a pushed card. transformers would put
        the Hub's card, or a stub one, in its place, with no public step between that and the upload."""
        push = HubPush(**options)
        card_file = checkpoint_card(self.config)
        if card_file is None:
            return super().push_to_hub(repo_id, **dataclasses.asdict(push))
        api = HfApi(token=push.token)
        repo_id = api.create_repo(repo_id, private=push.private, exist_ok=True).repo_id
        with tempfile.TemporaryDirectory() as staging:
            self.save_pretrained(staging, max_shard_size=push.max_shard_size)
            _tagged_card(card_file, repo_id, push).save(Path(staging) / CARD_FILE)
            if push.revision is not None and not push.revision.startswith("refs/pr"):
                api.create_branch(repo_id, branch=push.revision, exist_ok=True)
            return api.create_commit(
                repo_id=repo_id,
                operations=_additions(Path(staging)),
                commit_message=push.commit_message or "Upload model",
                commit_description=push.commit_description,
                revision=push.revision,
                create_pr=push.create_pr,
            )


@dataclasses.dataclass
class HubPush:
    """The options of transformers' `push_to_hub`, with its defaults."""

    commit_message: str | None = None
    commit_description: str | None = None
    private: bool | None = None
    token: bool | str | None = None
    revision: str | None = None
    create_pr: bool = False
    max_shard_size: int | str | None = "50GB"
    tags: list[str] | None = None


def _additions(folder: Path) -> list[CommitOperationAdd]:
    """A commit's operations that upload every file of `folder`, at the same paths in the repo."""
    return [
        CommitOperationAdd(path_in_repo=file.relative_to(folder).as_posix(), path_or_fileobj=str(file))
        for file in sorted(folder.rglob("*"))
        if file.is_file()
    ]


def _tagged_card(card_file: Path, repo_id: str, push: HubPush) -> ModelCard:
    """The checkpoint's card with the tags of the card transformers would push (the Hub's, or its stub)."""
    card = ModelCard.load(card_file)
    pushed_tags = create_and_tag_model_card(repo_id, push.tags, token=push.token).data.tags
    card.data.tags = list(dict.fromkeys([*(card.data.tags or []), *(pushed_tags or [])])) or None
    return card
