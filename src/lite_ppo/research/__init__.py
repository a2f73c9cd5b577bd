"""The paper's research loop as commands: named runs (:mod:`.run_dir`, :mod:`.run_record`), seed
sweeps (``lite-ppo sweep``), paper-style comparison figures (``lite-ppo compare``) and the technique
advisor (``lite-ppo advise``). Every command module exposes ``main(argv) -> int``."""
