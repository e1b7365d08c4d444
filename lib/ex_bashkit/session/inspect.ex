# How a session prints: its id, whether it is running, its cwd (read only
# when idle, since it lives in the interpreter) and its callbacks.
defimpl Inspect, for: ExBashkit.Session do
  # Shows what a person debugging wants: which session, whether it is busy,
  # where it is (cwd is only read when idle: it lives in the interpreter).
  def inspect(%{resource: resource, location: location} = session, _opts) do
    {id, running, cwd} =
      try do
        ExBashkit.Backend.info(resource, location) || {nil, false, nil}
      rescue
        # A session decoded from another node's term, or not made by new/1.
        ArgumentError -> {:foreign, false, nil}
      end

    fields =
      [id: id, status: if(running, do: :running, else: :idle)] ++
        if(cwd, do: [cwd: cwd], else: []) ++
        if(session.builtins == %{}, do: [], else: [builtins: Map.keys(session.builtins)]) ++
        if session.virtual_fs == %{}, do: [], else: [virtual_fs: Map.keys(session.virtual_fs)]

    "#ExBashkit.Session<" <>
      Enum.map_join(fields, ", ", fn {k, v} -> "#{k}: #{Kernel.inspect(v)}" end) <> ">"
  end
end
