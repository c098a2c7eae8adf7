"""The risk model: which one scores now, where it came from, what it learned and how it measured."""

from typing import Any

from fastapi import APIRouter

from api import schemas
from api.deps import ConfigDep, StoreDep
from api.errors import problem
from modelops.model_card import card_from_meta, describe
from store import NotFound

reads = APIRouter(prefix="/v1/model", tags=["model"])


@reads.get(
    "",
    response_model=schemas.ModelCard,
    responses={404: problem("no model: none stored is active and no scoring loop runs")},
)
def get_model(store: StoreDep, config: ConfigDep) -> dict[str, Any]:
    """The model the scoring loop uses: a stored, promoted one (`gpuhealth model promote`) or a file.

    Its card says what it was trained on (sets, spans, GPUs, failures), its validation scores,
    its holdout slice and promote's comparison there. `pending_version` names a newly active
    stored model the loop has not loaded yet (it does at its next round), `load_error` why one failed.
    """
    active = store.models.active_info()
    scorer = config.scorer
    if scorer is None:  # an API without a scoring loop: the store's word
        if active is None:
            raise NotFound("no stored model is active, and this API runs no scoring loop")
        return describe(active["card"], source="store", version=active["version"], created_at=active["created_at"],
                        activated_at=active["activated_at"])  # fmt: skip
    st = scorer.model_state
    pending = active["version"] if active is not None and active["version"] != st.version else None
    if st.source == "store" and st.version is not None:
        info = active if active is not None and active["version"] == st.version else store.models.info(st.version)
        return describe(info["card"], source="store", version=st.version, created_at=info["created_at"],
                        activated_at=info["activated_at"], loaded_at=st.loaded_at, pending_version=pending,
                        load_error=st.last_error)  # fmt: skip
    return describe(card_from_meta(st.meta), source="file", version=None, loaded_at=st.loaded_at,
                    pending_version=pending, load_error=st.last_error)  # fmt: skip
