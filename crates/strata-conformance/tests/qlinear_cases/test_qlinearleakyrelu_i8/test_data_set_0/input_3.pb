By_scaleJ
×#=