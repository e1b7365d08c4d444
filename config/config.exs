import Config

if config_env() == :test do
  config :ex_bashkit,
    # The suite runs twice (scripts/test): sessions in worker processes (the
    # default) and, with EX_BASHKIT_ISOLATION=in_node, in the node.
    isolation:
      if(System.get_env("EX_BASHKIT_ISOLATION") == "in_node", do: :in_node, else: :process),
    # Memory bombs in tests stop at 1 GiB per worker, not at the machine's RAM.
    worker_max_memory: 1024 ** 3,
    worker_kill_grace_ms: 1_000
end
