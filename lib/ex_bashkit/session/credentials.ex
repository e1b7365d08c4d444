defmodule ExBashkit.Session.Credentials do
  @moduledoc false
  # `:credentials` of `new/1`: `[{url_prefix, spec}]`, `spec` being
  # `bearer: token`, `header: {name, value}` or `headers: [{name, value}]`,
  # optionally with `placeholder: "ENV_NAME"` (the native side is
  # `native/ex_bashkit/src/policy/credentials.rs`).
  #
  # The secret must never show: not in an error message (nothing here
  # inspects a value that could be one), and not where a term is printed
  # (`inspect/1`, `:sys.get_state/1`, a crash report, a supervisor's child
  # spec). So the parsed entries are kept *sealed*, in a closure: what
  # prints is `#Function<...>`. They are unsealed only as they are handed to
  # the interpreter (`unseal/1`: the NIF call, the worker's `:new` frame).
  # Server and Pool seal the option as it arrives (`seal_option/1`), before
  # they keep the options for later sessions.

  @type entry :: %{
          prefix: String.t(),
          bearer: String.t() | nil,
          headers: [{String.t(), String.t()}],
          placeholder: String.t() | nil
        }

  @typedoc "Parsed entries in a closure, or `[]` (no credentials)."
  @type sealed :: [] | (() -> [entry()])

  @spec_keys [:bearer, :header, :headers, :placeholder]
  @header_name ~r/\A[!#$%&'*+.^_`|~0-9A-Za-z-]+\z/
  @env_name ~r/\A[A-Za-z_][A-Za-z0-9_]*\z/

  @doc false
  # The option's value checked and sealed. A value sealed by
  # `seal_option/1` is opened first.
  @spec parse!(term()) :: sealed()
  def parse!(value) when is_function(value, 0), do: parse!(value.())
  def parse!([]), do: []

  def parse!(list) when is_list(list) do
    entries = Enum.map(list, &entry!/1)
    placeholders = for %{placeholder: name} when name != nil <- entries, do: name

    if placeholder = Enum.find(placeholders -- Enum.uniq(placeholders), & &1) do
      raise ArgumentError, ":credentials names placeholder #{inspect(placeholder)} twice"
    end

    seal(entries)
  end

  def parse!(_other),
    do: raise(ArgumentError, ":credentials must be a list of {url_prefix, spec} entries")

  @doc false
  # `opts` with `:credentials` sealed, for options kept to build sessions
  # later (Server, Pool). Nothing is checked yet: `new/1` does.
  @spec seal_option(keyword()) :: keyword()
  def seal_option(opts) when is_list(opts) do
    case List.keyfind(opts, :credentials, 0) do
      {:credentials, value} when is_list(value) and value != [] ->
        List.keyreplace(opts, :credentials, 0, {:credentials, seal(value)})

      _ ->
        opts
    end
  end

  def seal_option(opts), do: opts

  @doc false
  # The native configuration with its credentials opened, for the
  # interpreter alone.
  @spec unseal(map()) :: map()
  def unseal(%{credentials: sealed} = native) when is_function(sealed, 0),
    do: %{native | credentials: sealed.()}

  def unseal(native), do: native

  @doc false
  # What a printed configuration may show of its credentials.
  @spec describe(sealed()) :: [%{prefix: String.t(), placeholder: String.t() | nil}]
  def describe([]), do: []

  def describe(sealed) when is_function(sealed, 0),
    do: Enum.map(sealed.(), &Map.take(&1, [:prefix, :placeholder]))

  defp seal(value), do: fn -> value end

  defp entry!({prefix, spec}) when is_binary(prefix) and is_list(spec) do
    if not String.valid?(prefix) or String.contains?(prefix, <<0>>) do
      raise ArgumentError, ":credentials prefixes must be valid UTF-8 strings"
    end

    what = ":credentials entry #{inspect(prefix)}"

    unless Enum.all?(spec, &match?({key, _} when key in @spec_keys, &1)) do
      raise ArgumentError,
            "#{what}: the spec is a keyword list of #{Enum.map_join(@spec_keys, ", ", &inspect/1)}"
    end

    secret =
      case Keyword.take(spec, [:bearer, :header, :headers]) do
        [bearer: token] -> %{bearer: value!(token, what, :bearer), headers: []}
        [header: header] -> %{bearer: nil, headers: [header!(header, what)]}
        [headers: [_ | _] = list] -> %{bearer: nil, headers: Enum.map(list, &header!(&1, what))}
        [headers: _] -> raise ArgumentError, "#{what}: :headers must be a non-empty list"
        _ -> raise ArgumentError, "#{what}: give exactly one of :bearer, :header or :headers"
      end

    Map.merge(secret, %{prefix: prefix, placeholder: placeholder!(spec[:placeholder], what)})
  end

  defp entry!(_other),
    do: raise(ArgumentError, "each :credentials entry must be {url_prefix, spec}")

  defp header!({name, value}, what) when is_binary(name) do
    if not Regex.match?(@header_name, name) do
      raise ArgumentError, "#{what}: #{inspect(name)} is not a header name"
    end

    {name, value!(value, what, name)}
  end

  defp header!(_other, what),
    do: raise(ArgumentError, "#{what}: a header is {name, value}, both strings")

  # The value is the secret: its message says what is wrong, never what it is.
  defp value!(value, what, name) do
    cond do
      not is_binary(value) or value == "" ->
        raise ArgumentError, "#{what}: the #{inspect(name)} value must be a non-empty string"

      not String.valid?(value) or String.contains?(value, ["\r", "\n", <<0>>]) ->
        raise ArgumentError,
              "#{what}: the #{inspect(name)} value must be valid UTF-8 without line breaks or NUL"

      true ->
        value
    end
  end

  defp placeholder!(nil, _what), do: nil

  defp placeholder!(name, what) when is_binary(name) do
    if Regex.match?(@env_name, name),
      do: name,
      else: raise(ArgumentError, "#{what}: :placeholder must be a shell variable name")
  end

  defp placeholder!(_other, what),
    do: raise(ArgumentError, "#{what}: :placeholder must be a shell variable name")
end
