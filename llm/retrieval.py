"""Nearest-neighbour replies from the Schema-Guided Dialogue training exchanges (TF-IDF,
scikit-learn): the retrieval baselines of ``quicksilver eval reply``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def exchange_key(system: str, user: str) -> str:
    """A retrieval key of an exchange: the user turn twice (it weighs more) and the previous
    system turn. On SGD dev (100 pairs, seed 0) the nearest training reply by this key scores
    chrF 23.4, by the user turn alone 20.7, by system + user once each 19.9."""
    return f"{user} {user} {system}"


class ReplyRetriever:
    """TF-IDF (word 1-2-grams, sublinear tf, ``min_df`` 2) nearest training key -> its reply.

    Args:
        keys: one retrieval text per training exchange.
        replies: the reply of each exchange (same length as ``keys``).

    Raises:
        ValueError: ``keys`` and ``replies`` differ in length or are empty.
    """

    def __init__(self, keys: Sequence[str], replies: Sequence[str]) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        if len(keys) != len(replies) or not keys:
            raise ValueError(f"need as many replies as keys (got {len(keys)} keys, {len(replies)} replies)")
        self.vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True, dtype=np.float32)
        # (terms, exchanges) CSR: a query's scores touch only the rows of its own terms
        self._by_term = self.vectorizer.fit_transform(keys).T.tocsr()
        self.replies = list(replies)

    def nearest(self, queries: Sequence[str], chunk: int = 256) -> list[int]:
        """Index of the nearest key (cosine of TF-IDF vectors) for each query; a query with no
        known term gets exchange 0. One query against the SGD train index: 3-8 ms."""
        out: list[int] = []
        for start in range(0, len(queries), chunk):
            scores = (self.vectorizer.transform(queries[start:start + chunk]) @ self._by_term).toarray()
            out += scores.argmax(axis=1).tolist()
        return out

    def __call__(self, query: str) -> str:
        """The reply of the nearest key."""
        return self.replies[self.nearest([query])[0]]
