defmodule ExBashkit.Server.Naming do
  @moduledoc false
  # A server's name: validated when it starts, registered by the server
  # itself in `init` (so that a successor can start while its predecessor
  # still holds the name), and handed from one process to the next by
  # `ExBashkit.Server.migrate/2`.
  #
  # Hand-over, by kind of name:
  #   * `{:global, n}` and `{:via, :global, n}`: `:global.re_register_name/2`
  #     moves the name atomically, cluster-wide; no call finds it missing.
  #   * any other `{:via, mod, n}`: the old process unregisters, then the
  #     new one registers (`claim/1`). With a node-local registry such as
  #     `Registry`, the new server is registered in the registry of its own
  #     node; callers elsewhere must use a cluster-wide name.
  #   * a local atom: the new server registers the atom on its own node; the
  #     old registration ends with the old process.

  @type name :: nil | atom() | {:global, term()} | {:via, module(), term()}

  @doc false
  @spec validate!(term()) :: name()
  def validate!(nil), do: nil
  def validate!(name) when is_atom(name), do: name
  def validate!({:global, _} = name), do: name
  def validate!({:via, mod, _} = name) when is_atom(mod), do: name

  def validate!(other),
    do:
      raise(
        ArgumentError,
        "ExBashkit.Server option :name must be an atom, {:global, term} or " <>
          "{:via, module, term}, got: #{inspect(other)}"
      )

  @doc false
  @spec whereis(name()) :: pid() | nil
  def whereis(nil), do: nil
  def whereis(name) when is_atom(name), do: Process.whereis(name)
  def whereis({:global, n}), do: pid_or_nil(:global.whereis_name(n))
  def whereis({:via, mod, n}), do: pid_or_nil(mod.whereis_name(n))

  defp pid_or_nil(pid) when is_pid(pid), do: pid
  defp pid_or_nil(_), do: nil

  @doc false
  # Register the calling process under `name`, unless `handoff_from` (the
  # predecessor of a migration) holds it: that one will hand it over.
  @spec register(name(), pid() | nil) :: :ok | {:error, {:already_started, pid()}}
  def register(nil, _handoff_from), do: :ok

  def register(name, handoff_from) do
    case whereis(name) do
      nil -> do_register(name)
      pid when pid == self() -> :ok
      pid when pid == handoff_from -> :ok
      pid -> {:error, {:already_started, pid}}
    end
  end

  defp do_register(name) when is_atom(name) do
    Process.register(self(), name)
    :ok
  rescue
    ArgumentError -> {:error, {:already_started, Process.whereis(name)}}
  end

  defp do_register({:global, n} = name), do: yes_or_taken(:global.register_name(n, self()), name)

  defp do_register({:via, mod, n} = name),
    do: yes_or_taken(mod.register_name(n, self()), name)

  defp yes_or_taken(:yes, _name), do: :ok
  defp yes_or_taken(_, name), do: {:error, {:already_started, whereis(name)}}

  @doc false
  # Run by the old server of a migration, once `new` is ready to serve.
  # Returns whether `new` must still claim the name itself.
  @spec hand_over(name(), pid()) :: :claimed | :claim
  def hand_over(nil, _new), do: :claimed

  def hand_over({:global, n}, new) do
    :yes = :global.re_register_name(n, new)
    :claimed
  end

  def hand_over({:via, :global, n}, new), do: hand_over({:global, n}, new)
  def hand_over(name, _new) when is_atom(name), do: :claimed

  def hand_over({:via, mod, n} = name, _new) do
    if whereis(name) == self(), do: mod.unregister_name(n)
    :claim
  end
end
