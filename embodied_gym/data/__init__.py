"""The dataset contract of embodied-gym: schema (:mod:`.features`), the one reader (:mod:`.reader`), the
one writer (:mod:`.writer`), recording from an env (:mod:`.recording`) and open-loop replay
(:mod:`.replay`)."""
